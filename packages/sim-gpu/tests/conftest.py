"""Fixtures for the gpu surface tests: a stand-in built library, resolved nodes, staged roots, tools."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mokka_core.model.node import Node
from mokka_core.model.spec import NodeSpec
from mokka_core.stage import nvidia_smi
from mokka_core.stage.staging import stage_wave, teardown
from mokka_core.stage.surface import StageContext
from mokka_core.testing import consumers
from mokka_core.testing.consumers import missing
from mokka_sim_gpu.surface import GpuSurface


def resolve_node(profile: str, gpus: int | None = None, **surfaces: dict[str, object]) -> Node:
    return NodeSpec(profile=profile, gpus=gpus, surfaces=dict(surfaces)).resolve()


@pytest.fixture
def native_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory laid out like ``make -C native install`` output; the library is a stand-in file."""
    directory = tmp_path / "native"
    directory.mkdir()
    (directory / "libnvidia-ml.so.550.163.01").write_bytes(b"\x7fELF stand-in for the mock library\n")
    os.symlink("libnvidia-ml.so.550.163.01", directory / "libnvidia-ml.so.1")
    os.symlink("libnvidia-ml.so.1", directory / "libnvidia-ml.so")
    libs = directory / "driver-libs"  # the driver's other libraries (native/driverlibs), two of them
    libs.mkdir()
    (libs / "libraries.txt").write_text(
        "# library soname\nlibcuda.so libcuda.so.1\nlibnvidia-nvvm.so libnvidia-nvvm.so.4\nlibnvidia-gpucomp.so -\n")
    for name in ("libcuda.so", "libnvidia-nvvm.so"):
        (libs / name).write_bytes(b"\x7fELF stand-in for a driver library\n")
    slot = b"VERSION_SLOT_OF_THE_DRIVER_VERSION_XXXXX"  # a soname staging writes the version over
    (libs / "libnvidia-gpucomp.so").write_bytes(b"\x7fELF\0libnvidia-gpucomp.so." + slot + b"\0")
    monkeypatch.setenv("MOKKA_NATIVE_DIR", str(directory))
    return directory


@pytest.fixture(autouse=True)
def nvidia_smi_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache holding a stand-in nvidia-smi of branch 550 (as `mokka fetch nvidia-smi` leaves it), so
    what a plan stages does not depend on this machine's cache; a test may empty it."""
    cache = tmp_path_factory.mktemp("mokka-cache") / "nvidia-smi"
    binary = cache / "550" / nvidia_smi.BINARY
    binary.parent.mkdir(parents=True)
    binary.write_bytes(b"#!/bin/sh\necho stand-in nvidia-smi\n")
    (cache / "550" / nvidia_smi.COMPLETE).write_text("nvidia-smi_550.deb\n")
    monkeypatch.setenv("MOKKA_CACHE", str(cache.parent))
    return cache


@pytest.fixture
def make_node() -> Callable[..., Node]:
    return resolve_node


@pytest.fixture
def staged(tmp_path: Path, native_dir: Path) -> Iterator[Callable[..., Path]]:
    """Stage the gpu surface of a node under a fresh root; tear everything down afterwards."""
    roots: list[Path] = []

    def stage(profile: str, gpus: int | None = None, **surfaces: dict[str, object]) -> Path:
        root = tmp_path / f"root{len(roots)}"
        state = resolve_node(profile, gpus, **surfaces)
        plan = GpuSurface().plan(state, StageContext(root=root, native_dir=native_dir))
        stage_wave({"gpu": plan}, root)
        roots.append(root)
        return root

    yield stage
    for root in roots:
        teardown(root, "gpu")


def apt_tool(binary: str, package: str) -> Path:
    """A tool from a Debian package: found on PATH, else installed with apt-get when root."""
    return consumers.apt_tool(binary, package)


def private_namespace_available() -> bool:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True)
    return probe.returncode == 0


@pytest.fixture(scope="session")
def in_namespace() -> Callable[[str], subprocess.CompletedProcess[str]]:
    """Run a shell script as root in a private mount namespace (nothing it mounts reaches the host)."""
    if not private_namespace_available():
        missing("needs root and `unshare -m` for a private mount namespace")

    def run(script: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-ec", script],
                              capture_output=True, text=True, timeout=60)

    return run


@pytest.fixture(scope="session")
def lsmod_bin() -> Path:
    return apt_tool("lsmod", "kmod")


@pytest.fixture(scope="session")
def modinfo_bin() -> Path:
    return apt_tool("modinfo", "kmod")


@pytest.fixture
def lsmod(lsmod_bin: Path, in_namespace: Callable[[str], subprocess.CompletedProcess[str]]) -> Callable[[Path], str]:
    """Run the real lsmod with a staged root's module state at the real paths, as `mokka run` delivers it:
    the staged ``proc/modules`` over ``/proc/modules`` (on a tmpfs: this kernel may have none) and the
    staged ``sys`` overlaid on ``/sys``."""

    def run(root: Path) -> str:
        modules = root / "proc/modules"
        copy = f"cp {modules} /proc/modules" if modules.exists() else ": > /proc/modules"
        sys_layer = (
            # where overlayfs over sysfs is refused, binding the staged modules alone is enough for lsmod
            f"mount -t overlay overlay -o lowerdir={root}/sys:/sys /sys 2>/dev/null"
            f" || mount --bind {root}/sys/module /sys/module"
            if (root / "sys/module").exists() else ":"
        )
        result = in_namespace(f"mount -t tmpfs none /proc; {copy}; {sys_layer}; {lsmod_bin}")
        assert result.returncode == 0, result.stderr
        return result.stdout

    return run
