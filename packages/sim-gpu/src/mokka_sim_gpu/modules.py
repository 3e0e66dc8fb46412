"""Kernel-module state: ``/proc/modules`` lines and ``/sys/module/<name>``, as lsmod and modinfo read them.

lsmod (kmod) lists the names in ``/proc/modules`` and reads each module's size, use count and
holders from ``/sys/module/<name>/{coresize,refcnt,holders/}``; both views are rendered from
one table so they always agree.  Beside the driver's four: the kernel's own InfiniBand stack where the node
has HCAs (in-tree: no taint, no version), and the GPUDirect modules the profile loads
(``system.gpudirect``): nvidia_peermem (the driver's, holding nvidia and ib_core; only with HCAs), nvidia_fs
(GDS) and gdrdrv (GDRCopy, holding nvidia), each out of tree.  /proc/modules is one file: where the driver
is not loaded (the gpu surface failed) it lists the InfiniBand stack alone.
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
#: Open source, out of tree, unsigned (nvidia-fs, gdrcopy: GPL, built by DKMS).
TAINT_OPEN = "OE"
#: The releases of the out-of-tree GPUDirect modules whose ``version`` /sys/module shows.
NVIDIA_FS_VERSION = "2.17.5"
GDRDRV_VERSION = "2.4.1"
LOAD_ADDRESS = 0xFFFF_FFFF_C000_0000


class Module(NamedTuple):
    name: str
    size: int  # bytes of core text+data, page aligned
    holders: tuple[str, ...]  # modules that depend on this one
    extra_refs: int  # open device files and other references beside the holders
    parameters: tuple[tuple[str, str], ...]
    taint: str = TAINT  # "" for an in-tree module
    version: str | None = None  # MODULE_VERSION (None: the driver's for NVIDIA's modules, none for in-tree ones)

    @property
    def refcnt(self) -> int:
        return len(self.holders) + self.extra_refs


def loaded_modules(node: Node) -> list[Module]:
    """Every module of the node, newest first (the order the kernel lists them in /proc/modules): the GPUDirect
    ones the profile loads, the driver's four (where it is loaded), the InfiniBand stack (where there are HCAs)."""
    direct = node.system.gpudirect
    driver = node.driver_loaded
    peermem = driver and direct.rdma and bool(node.hcas)
    gdrdrv = driver and direct.gdrcopy
    modules: list[Module] = []
    if gdrdrv:
        modules.append(Module("gdrdrv", 24_576, (), 0, (("dbg_enabled", "0"), ("info_enabled", "0")), TAINT_OPEN,
                              GDRDRV_VERSION))
    if driver and direct.storage:
        modules.append(Module("nvidia_fs", 262_144, (), 0, (("rw_stats_enabled", "0"), ("peer_stats_enabled", "0")),
                              TAINT_OPEN, NVIDIA_FS_VERSION))
    if peermem:
        modules.append(Module("nvidia_peermem", 16_384, (), 0, (("peerdirect_support", "0"),)))
    if driver:
        modules += nvidia_modules(node, ("nvidia_uvm", *(("nvidia_peermem",) if peermem else ()), "nvidia_modeset",
                                         *(("gdrdrv",) if gdrdrv else ())))
    if node.hcas:
        modules += [
            Module("mlx5_ib", 450_560, (), 0, (("dc_cnak_qp_depth", "0"),), ""),
            Module("ib_uverbs", 192_512, ("mlx5_ib",), 0, (), ""),
            Module("ib_core", 487_424, ("mlx5_ib", "ib_uverbs", *(("nvidia_peermem",) if peermem else ())), 0, (), ""),
            Module("mlx5_core", 2_019_328, ("mlx5_ib",), 0, (("debug_mask", "0"), ("prof_sel", "2")), ""),
        ]
    return modules


def nvidia_modules(node: Node, nvidia_holders: tuple[str, ...]) -> list[Module]:
    """The driver's four modules, newest first; ``nvidia_holders``: the modules that use nvidia."""
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
        Module("nvidia", 54_341_632, nvidia_holders, opened, nvidia_parameters()),
    ]


def nvidia_parameters() -> tuple[tuple[str, str], ...]:
    numeric = tuple((f"NVreg_{name}", str(value)) for name, value in PARAMS)
    return numeric + tuple((f"NVreg_{name}", "(null)") for name in STRING_PARAMS)


def render_proc_modules(modules: list[Module]) -> str:
    lines = []
    address = LOAD_ADDRESS
    for module in modules:
        deps = "".join(f"{holder}," for holder in module.holders) or "-"
        taint = f" ({module.taint})" if module.taint else ""
        lines.append(f"{module.name} {module.size} {module.refcnt} {deps} Live 0x{address:016x}{taint}")
        address += (module.size + 0xFFFFF) & ~0xFFFFF
    return "\n".join(lines) + "\n"


def srcversion(name: str, driver_version: str) -> str:
    """A stable stand-in for the MD4 of the module's sources (23 upper-case hex digits, as modpost writes)."""
    return hashlib.sha256(f"{name}-{driver_version}".encode()).hexdigest()[:23].upper()


def module_entries(node: Node) -> list[Entry]:
    modules = loaded_modules(node)
    if not modules:
        return []
    entries: list[Entry] = [File(PROC_MODULES, render_proc_modules(modules), mode=0o444)]
    for module in modules:
        base = f"{SYS_MODULE}/{module.name}"
        version = module.version or (node.driver_version if module.taint == TAINT else None)
        entries.append(Dir(base))
        if version is not None:  # an in-tree module without MODULE_VERSION has neither file
            entries += [File(f"{base}/version", f"{version}\n", mode=0o444),
                        File(f"{base}/srcversion", f"{srcversion(module.name, version)}\n", mode=0o444)]
        entries += [
            File(f"{base}/initstate", "live\n", mode=0o444),
            File(f"{base}/refcnt", f"{module.refcnt}\n", mode=0o444),
            File(f"{base}/coresize", f"{module.size}\n", mode=0o444),
            File(f"{base}/initsize", "0\n", mode=0o444),
            File(f"{base}/taint", f"{module.taint}\n", mode=0o444),
            File(f"{base}/uevent", "", mode=0o200),
            Dir(f"{base}/holders"),
            Dir(f"{base}/parameters"),
        ]
        entries += [Symlink(f"{base}/holders/{holder}", f"../../{holder}") for holder in module.holders]
        entries += [File(f"{base}/parameters/{name}", f"{value}\n", mode=0o444) for name, value in module.parameters]
    return entries
