"""Kernel-module state: ``/proc/modules`` lines and ``/sys/module/<name>``, as lsmod and modinfo read them.

lsmod (kmod) lists the names in ``/proc/modules`` and reads each module's size, use count and
holders from ``/sys/module/<name>/{coresize,refcnt,holders/}``; both views are rendered from
one table so they always agree.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, NamedTuple

from mokka_core.stage.surface import Dir, Entry, File, Symlink

from .render_proc import PARAMS, STRING_PARAMS

if TYPE_CHECKING:
    from mokka_core.model.node import Node

PROC_MODULES = "proc/modules"
SYS_MODULE = "sys/module"
#: Proprietary, out-of-tree, unsigned: how the taint column shows NVIDIA's DKMS-built modules.
TAINT = "POE"
LOAD_ADDRESS = 0xFFFF_FFFF_C000_0000


class Module(NamedTuple):
    name: str
    size: int  # bytes of core text+data, page aligned
    holders: tuple[str, ...]  # modules that depend on this one
    extra_refs: int  # open device files and other references beside the holders
    parameters: tuple[tuple[str, str], ...]

    @property
    def refcnt(self) -> int:
        return len(self.holders) + self.extra_refs


def loaded_modules(node: Node) -> list[Module]:
    """The four NVIDIA modules, newest first (the order the kernel lists them in /proc/modules)."""
    persistent = [gpu for gpu in node.gpus if gpu.config.persistence_mode == "enabled"]
    # nvidia-persistenced keeps every GPU's /dev/nvidiaN and /dev/nvidiactl open
    opened = len(persistent) + 1 if persistent else 0
    return [
        Module("nvidia_drm", 122_880, (), 0, (("modeset", "N"), ("fbdev", "N"))),
        Module("nvidia_modeset", 1_458_176, ("nvidia_drm",), 0, (
            ("hdmi_deepcolor", "Y"), ("vblank_sem_control", "N"), ("opportunistic_display_sync", "Y"),
            ("malloc_verbose", "N"), ("fail_malloc", "-1"), ("output_rounding_fix", "Y"),
        )),
        Module("nvidia_uvm", 4_923_392, (), 0, (
            ("uvm_ats_mode", "1"), ("uvm_perf_prefetch_enable", "1"), ("uvm_global_oversubscription", "1"),
            ("uvm_enable_builtin_tests", "0"), ("uvm_disable_hmm", "N"),
        )),
        Module("nvidia", 54_341_632, ("nvidia_uvm", "nvidia_modeset"), opened, nvidia_parameters()),
    ]


def nvidia_parameters() -> tuple[tuple[str, str], ...]:
    numeric = tuple((f"NVreg_{name}", str(value)) for name, value in PARAMS)
    return numeric + tuple((f"NVreg_{name}", "(null)") for name in STRING_PARAMS)


def render_proc_modules(modules: list[Module]) -> str:
    lines = []
    address = LOAD_ADDRESS
    for module in modules:
        deps = "".join(f"{holder}," for holder in module.holders) or "-"
        lines.append(f"{module.name} {module.size} {module.refcnt} {deps} Live 0x{address:016x} ({TAINT})")
        address += (module.size + 0xFFFFF) & ~0xFFFFF
    return "\n".join(lines) + "\n"


def srcversion(name: str, driver_version: str) -> str:
    """A stable stand-in for the MD4 of the module's sources (23 upper-case hex digits, as modpost writes)."""
    return hashlib.sha256(f"{name}-{driver_version}".encode()).hexdigest()[:23].upper()


def module_entries(node: Node) -> list[Entry]:
    modules = loaded_modules(node)
    entries: list[Entry] = [File(PROC_MODULES, render_proc_modules(modules), mode=0o444)]
    for module in modules:
        base = f"{SYS_MODULE}/{module.name}"
        entries += [
            Dir(base),
            File(f"{base}/version", f"{node.driver_version}\n", mode=0o444),
            File(f"{base}/srcversion", f"{srcversion(module.name, node.driver_version)}\n", mode=0o444),
            File(f"{base}/initstate", "live\n", mode=0o444),
            File(f"{base}/refcnt", f"{module.refcnt}\n", mode=0o444),
            File(f"{base}/coresize", f"{module.size}\n", mode=0o444),
            File(f"{base}/initsize", "0\n", mode=0o444),
            File(f"{base}/taint", f"{TAINT}\n", mode=0o444),
            File(f"{base}/uevent", "", mode=0o200),
            Dir(f"{base}/holders"),
            Dir(f"{base}/parameters"),
        ]
        entries += [Symlink(f"{base}/holders/{holder}", f"../../{holder}") for holder in module.holders]
        entries += [File(f"{base}/parameters/{name}", f"{value}\n", mode=0o444) for name, value in module.parameters]
    return entries
