"""``/proc/driver/nvidia``: the NVIDIA kernel module's procfs files, in its formats.

Formats follow the module's ``nv-procfs.c`` (``seq_printf`` with its tabs and spacing):
``version`` (NVRM and compiler lines), ``params`` (every registry parameter and its value),
``registry`` and per-GPU ``gpus/<bdf>/{information,registry}``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from mokka_core.model.identity import gpu_dma_bits, legacy_irq
from mokka_core.stage.surface import Entry, File

if TYPE_CHECKING:
    from mokka_core.model.node import Gpu, Node

PROC_DIR = "proc/driver/nvidia"

#: The compiler line of a module built by DKMS on Debian 12 (what NV_COMPILER records).
GCC_VERSION = "gcc version 12.2.0 (Debian 12.2.0-14)"
#: When NVIDIA built each release's kernel module, as its version banner prints it (the NVRM lines of real nodes'
#: /proc/driver/nvidia/version and boot logs, the proprietary x86_64 modules).
BUILD_DATES = {
    "550.163.01": "Tue Apr  8 12:41:17 UTC 2025",
    "580.65.06": "Sun Jul 27 06:54:38 UTC 2025",
    "580.105.08": "Wed Oct 29 23:15:11 UTC 2025",
    "580.173.02": "Tue Jun 23 08:38:17 UTC 2026",
}
#: The stamp of a release whose real one is not in BUILD_DATES.
UNKNOWN_BUILD_DATE = "Wed Jan 15 11:23:46 UTC 2025"
UNKNOWN_VBIOS = "??.??.??.??.??"

#: nv_parms[] of the 550 module in table order, with the module's defaults.
PARAMS: tuple[tuple[str, int], ...] = (
    ("ResmanDebugLevel", 0xFFFFFFFF),
    ("RmLogonRC", 1),
    ("ModifyDeviceFiles", 1),
    ("DeviceFileUID", 0),
    ("DeviceFileGID", 0),
    ("DeviceFileMode", 0o666),
    ("InitializeSystemMemoryAllocations", 1),
    ("UsePageAttributeTable", 0xFFFFFFFF),
    ("EnableMSI", 1),
    ("EnablePCIeGen3", 0),
    ("MemoryPoolSize", 0),
    ("KMallocHeapMaxSize", 0),
    ("VMallocHeapMaxSize", 0),
    ("IgnoreMMIOCheck", 0),
    ("EnableStreamMemOPs", 0),
    ("EnableUserNUMAManagement", 1),
    ("NvLinkDisable", 0),
    ("RmProfilingAdminOnly", 1),
    ("PreserveVideoMemoryAllocations", 0),
    ("EnableS0ixPowerManagement", 0),
    ("S0ixPowerManagementVideoMemoryThreshold", 256),
    ("DynamicPowerManagement", 3),
    ("DynamicPowerManagementVideoMemoryThreshold", 200),
    ("RegisterPCIDriver", 1),
    ("EnablePCIERelaxedOrderingMode", 0),
    ("EnableResizableBar", 0),
    ("EnableGpuFirmware", 18),
    ("EnableGpuFirmwareLogs", 2),
    ("RmNvlinkBandwidthLinkCount", 0),
    ("EnableDbgBreakpoint", 0),
    ("OpenRmEnableUnsupportedGpus", 1),
    ("DmaRemapPeerMmio", 1),
    ("ImexChannelCount", 2048),
    ("CreateImexChannel0", 0),
    ("GrdmaPciTopoCheckOverride", 0),
)
#: The string parameters printed after the numeric ones (all unset by default).
STRING_PARAMS = ("RegistryDwords", "RegistryDwordsPerDevice", "RmMsg", "GpuBlacklist", "TemporaryFilePath",
                 "ExcludedGpus")


def proc_entries(node: Node) -> list[Entry]:
    entries: list[Entry] = [
        File(f"{PROC_DIR}/version", render_version(node.driver_version), mode=0o444),
        File(f"{PROC_DIR}/params", render_params(), mode=0o444),
        File(f"{PROC_DIR}/registry", render_registry(), mode=0o644),
    ]
    for gpu in node.gpus:
        base = f"{PROC_DIR}/gpus/{gpu.bus_id}"
        entries.append(File(f"{base}/information", render_information(gpu, node.gpu_lost(gpu)), mode=0o444))
        entries.append(File(f"{base}/registry", render_registry(), mode=0o644))
    return entries


def kernel_arch() -> str:
    """The architecture the kernel module names itself for: the host's."""
    return os.uname().machine


def build_date(driver_version: str) -> str:
    """The build stamp the module of ``driver_version`` prints after its version."""
    return BUILD_DATES.get(driver_version, UNKNOWN_BUILD_DATE)


def render_version(driver_version: str, machine: str | None = None) -> str:
    arch = machine or kernel_arch()
    return (
        f"NVRM version: NVIDIA UNIX {arch} Kernel Module  {driver_version}  {build_date(driver_version)}\n"
        f"GCC version:  {GCC_VERSION}\n"
    )


def render_params() -> str:
    lines = [f"{name}: {value}" for name, value in PARAMS]
    lines += [f'{name}: ""' for name in STRING_PARAMS]
    return "\n".join(lines) + "\n"


def render_registry() -> str:
    return 'Binary: ""\n'


def render_information(gpu: Gpu, lost: bool | None = None) -> str:
    """One GPU's ``information`` file.  A lost GPU (``lost``, default: its own fault) no longer
    answers RM: no UUID, unknown VBIOS."""
    lost = gpu.lost if lost is None else lost
    cfg = gpu.config
    bits = gpu_dma_bits(cfg.architecture)
    lines = [
        f"Model: \t\t {cfg.name or 'NVIDIA Graphics Device'}",
        f"IRQ:   \t\t {legacy_irq(gpu.bus_id)}",
    ]
    if not lost:
        lines.append(f"GPU UUID: \t {gpu.uuid}")
    lines += [
        f"Video BIOS: \t {UNKNOWN_VBIOS if lost else (cfg.vbios_version or UNKNOWN_VBIOS)}",
        "Bus Type: \t PCIe",
        f"DMA Size: \t {bits} bits",
        f"DMA Mask: \t 0x{(1 << bits) - 1:x}",
        f"Bus Location: \t {gpu.bus_id}",
        f"Device Minor: \t {gpu.minor_number}",
    ]
    firmware = cfg.gsp_firmware
    if firmware and firmware.mode == "enabled" and firmware.version and not lost:
        lines.append(f"GPU Firmware: \t {firmware.version}")
    lines.append("GPU Excluded:\t No")
    return "\n".join(lines) + "\n"


