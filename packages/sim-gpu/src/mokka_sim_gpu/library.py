"""The driver's user-space side: the NVML library chain, the driver package's other libraries and the NVML state
file the library reads."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from mokka_core.errors import MokkaError
from mokka_core.stage import paths
from mokka_core.stage.native import native_library
from mokka_core.stage.paths import say_once
from mokka_core.stage.surface import Copy, Entry, File, Runtime, StageContext, Symlink

if TYPE_CHECKING:
    from mokka_core.model.node import Node

LIBRARY = "libnvidia-ml.so"
SONAME = f"{LIBRARY}.1"


class LibraryNotBuilt(MokkaError):
    """No built mock libnvidia-ml to stage."""


class ServiceNotBuilt(MokkaError):
    """No built program for one of the driver's services (mokka-kmsg, mokka-persistenced)."""


def service_program(name: str, ctx: StageContext) -> Path:
    """The built program ``name`` beside the mock library, or an error that says how to build it."""
    program = native_library(name, ctx.native_dir)
    if program is None:
        raise ServiceNotBuilt(f"gpu: the {name} service is not built (no {name} in mokka_core/_native or "
                              "$MOKKA_NATIVE_DIR); run `make -C native install` first")
    return program


def library_entries(node: Node, ctx: StageContext) -> list[Entry]:
    """``libnvidia-ml.so.<driver>``, ``.so.1`` -> it and ``.so`` -> ``.so.1``, as the driver packages install them."""
    versioned = f"{LIBRARY}.{node.driver_version}"
    return [
        Copy(f"{paths.LIB_DIR}/{versioned}", built_library(ctx.native_dir, node.driver_version), mode=0o755),
        Symlink(f"{paths.LIB_DIR}/{SONAME}", versioned),
        Symlink(f"{paths.LIB_DIR}/{LIBRARY}", SONAME),
    ]


#: the stubs of the driver package's other libraries and their table (native/driverlibs), in the native bundle
DRIVER_LIBS = "driver-libs"
DRIVER_LIBS_TABLE = "libraries.txt"
#: the soname a stub whose soname is its versioned name carries until staged (native/driverlibs/driverlibs.mk)
VERSION_SLOT = b"VERSION_SLOT_OF_THE_DRIVER_VERSION_XXXXX"


def driver_library_entries(node: Node, ctx: StageContext) -> list[Entry]:
    """Each other library of the driver package (native/driverlibs/libraries.txt: libcuda, libnvidia-ptxjitcompiler,
    ...) as ``<library>.<driver>`` with its ``<soname>`` link beside libnvidia-ml.  A native bundle without them (one
    built before they were, a test's stand-in) stages none, and says so once."""
    directory = ctx.native_dir / DRIVER_LIBS if ctx.native_dir is not None else None
    if directory is None or not (directory / DRIVER_LIBS_TABLE).is_file():
        import logging  # only here, as tools.nvidia_smi_entries: logging costs the ctl milliseconds

        say_once(logging.getLogger(__name__), "no-driver-libs", "gpu: the driver's other libraries (libcuda.so.1, "
                 "...) are not built, the node has libnvidia-ml alone; run `make -C native install`")
        return []
    entries: list[Entry] = []
    for line in (directory / DRIVER_LIBS_TABLE).read_text().splitlines():
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        library, soname = fields[:2]
        versioned = f"{library}.{node.driver_version}"
        if soname == "-":  # its soname is its versioned name: this version written over the slot, no link
            entries.append(File(f"{paths.LIB_DIR}/{versioned}", versioned_soname(directory / library,
                                                                                node.driver_version), mode=0o755))
            continue
        entries += [Copy(f"{paths.LIB_DIR}/{versioned}", directory / library, mode=0o755),
                    Symlink(f"{paths.LIB_DIR}/{soname}", versioned)]
    return entries


def versioned_soname(stub: Path, driver_version: str) -> bytes:
    """The stub with ``driver_version`` in its soname's slot (the string table keeps its size: NUL-padded)."""
    data, version = stub.read_bytes(), driver_version.encode()
    if VERSION_SLOT not in data or len(version) > len(VERSION_SLOT):
        raise LibraryNotBuilt(f"gpu: {stub} has no soname slot for driver {driver_version}; "
                              "run `make -C native install`")
    return data.replace(VERSION_SLOT, version.ljust(len(VERSION_SLOT), b"\0"))


def built_library(native_dir: Path | None, driver_version: str) -> Path:
    """The built mock library: the one named for this driver version, else the one ``.so.1`` names.

    The mock serves every driver version from the state file, so one build stages under any
    profile's version number.
    """
    if native_dir is None:
        raise LibraryNotBuilt(
            "gpu: the mock libnvidia-ml is not built (no mokka_core/_native and no $MOKKA_NATIVE_DIR); "
            "run `make -C native install` first"
        )
    exact = native_dir / f"{LIBRARY}.{driver_version}"
    if exact.is_file():
        return exact
    linked = native_dir / SONAME
    if linked.exists():
        return linked.resolve()
    candidates = sorted(p for p in native_dir.glob(f"{LIBRARY}.*.*") if p.is_file() and not p.is_symlink())
    if candidates:
        return candidates[-1]
    raise LibraryNotBuilt(f"gpu: no {LIBRARY}.<version> in {native_dir}; run `make -C native install` first")


def state_file_entries(node: Node, ctx: StageContext) -> list[Entry]:
    """The NVML state file, with the keys the other surfaces contribute (its renderer lives in mokka-core,
    beside the format it documents), and the setter record the library writes beside it."""
    from mokka_core.stage.nvml_settings import RUNTIME_FILES
    from mokka_core.stage.nvml_view import render_nvml_state

    return [File(paths.NVML_STATE_FILE, render_nvml_state(node, ctx.nvml, ctx.booted_ms), mode=0o644),
            *(Runtime(path) for path in RUNTIME_FILES)]
