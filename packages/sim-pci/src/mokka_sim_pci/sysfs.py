"""Render PCI functions as the kernel's sysfs shows them, in its exact file formats.

Layout (relative to the root)::

    sys/devices/pci0000:80/                       root complex (host bridge) directory
    sys/devices/pci0000:80/0000:9d:00.0/          the function: vendor device class ... config
    sys/bus/pci/devices/0000:9d:00.0 -> ../../../devices/pci0000:80/0000:9d:00.0
    sys/bus/pci/drivers/nvidia/0000:9d:00.0 -> ../../../../devices/pci0000:80/0000:9d:00.0
    sys/kernel/iommu_groups/<n>/devices/0000:9d:00.0 -> ../../../../devices/pci0000:80/0000:9d:00.0

Functions hang directly off their root complex (no switch ports are modelled).  Attributes the
kernel caches at enumeration (vendor, device, class, subsystem ids, irq) keep their values when
a function stops responding; everything read live from the device (config, link status) reads
all ones, as on a GPU that fell off the bus.
"""

from __future__ import annotations

import functools

from mokka_core.model.numa import parse_cpulist
from mokka_core.stage.surface import Dir, Entry, File, Symlink

__all__ = ["Dir", "driver_entries", "function_entries", "root_complex_entries"]

from .config_space import RESET_METHODS, Bar, Sriov, build_config, dead_config
from .devices import PciFunction

SYS_DEVICES = "sys/devices"
BUS_DEVICES = "sys/bus/pci/devices"
BUS_DRIVERS = "sys/bus/pci/drivers"
IOMMU_GROUPS = "sys/kernel/iommu_groups"
#: Where other filesystems mount inside a real sysfs: a container runtime mounts the cgroup hierarchy at
#: /sys/fs/cgroup of a container whose /sys is the node's sysfs (mokka-nri's sysfs swap), and cannot create it there.
MOUNT_POINTS = ("sys/fs/cgroup",)

#: PCIe generation -> the kernel's link speed string (drivers/pci/pci.h: pci_speed_string)
LINK_SPEEDS = {1: "2.5 GT/s PCIe", 2: "5.0 GT/s PCIe", 3: "8.0 GT/s PCIe", 4: "16.0 GT/s PCIe",
               5: "32.0 GT/s PCIe", 6: "64.0 GT/s PCIe"}

# struct resource flags (include/linux/ioport.h) as sysfs ``resource`` prints them
IORESOURCE_MEM = 0x0000_0200
IORESOURCE_PREFETCH = 0x0000_2000
IORESOURCE_SIZEALIGN = 0x0004_0000
IORESOURCE_MEM_64 = 0x0010_0000
RESOURCE_LINES = 13  # 6 BARs, the ROM, 6 SR-IOV BARs: what resource_show prints for an endpoint


def device_dir(fn: PciFunction) -> str:
    return f"{SYS_DEVICES}/{fn.root.id}/{fn.bus_id}"


def function_entries(fn: PciFunction, nr_cpus: int) -> list[Entry]:
    """The device directory of one function and its links.  Remembered (functions are frozen values):
    a change to one GPU of 72 builds one function's directory again, not 864."""
    return list(_function_entries(fn, nr_cpus))


@functools.lru_cache(maxsize=2048)
def _function_entries(fn: PciFunction, nr_cpus: int) -> tuple[Entry, ...]:
    return tuple(_build_function_entries(fn, nr_cpus))


def _build_function_entries(fn: PciFunction, nr_cpus: int) -> list[Entry]:
    base = device_dir(fn)
    f = fn.function
    attrs = {
        "vendor": f"0x{f.vendor:04x}\n",
        "device": f"0x{f.device:04x}\n",
        "class": f"0x{f.class_code:06x}\n",
        "subsystem_vendor": f"0x{f.subsystem_vendor:04x}\n",
        "subsystem_device": f"0x{f.subsystem_device:04x}\n",
        "revision": f"0x{f.revision:02x}\n",
        "irq": f"{f.irq}\n",
        "numa_node": f"{fn.numa_node}\n",
        "local_cpus": cpumask(list(parse_cpulist(fn.cpulist)), nr_cpus) + "\n",
        "local_cpulist": f"{fn.cpulist}\n",
        "resource": resource_table(f.bars),
        "enable": "1\n",
        "max_link_speed": f"{LINK_SPEEDS[f.link.max_gen]}\n",
        "max_link_width": f"{f.link.max_width}\n",
        "current_link_speed": f"{LINK_SPEEDS[f.link.current_gen]}\n" if fn.responding else "Unknown\n",
        "current_link_width": f"{f.link.current_width}\n" if fn.responding else "63\n",
        "dma_mask_bits": f"{fn.dma_bits}\n",
        "consistent_dma_mask_bits": f"{fn.dma_bits}\n",
        "modalias": modalias(fn) + "\n",
        "uevent": uevent(fn),
        "power_state": "D0\n" if fn.responding else "unknown\n",
        "d3cold_allowed": "1\n",
        "broken_parity_status": "0\n",
        "msi_bus": "1\n",
        "ari_enabled": "0\n",
        "driver_override": "(null)\n",
        "reset_method": " ".join(RESET_METHODS) + "\n",
    }
    entries: list[Entry] = [Dir(base)]
    entries += [File(f"{base}/{name}", content, mode=0o444) for name, content in attrs.items()]
    entries.append(File(f"{base}/reset", "", mode=0o200))  # write-only: "1" resets the function
    if f.sriov is not None:
        entries += sriov_entries(base, f.sriov)
    config = build_config(f) if fn.responding else dead_config()
    entries.append(File(f"{base}/config", config, mode=0o644))
    entries.append(Symlink(f"{base}/subsystem", "../../../bus/pci"))
    entries.append(Symlink(f"{base}/iommu_group", f"../../../kernel/iommu_groups/{fn.iommu_group}"))
    entries.append(Symlink(f"{BUS_DEVICES}/{fn.bus_id}", f"../../../devices/{fn.root.id}/{fn.bus_id}"))
    group = f"{IOMMU_GROUPS}/{fn.iommu_group}"
    entries.append(Dir(group))
    entries.append(File(f"{group}/type", "DMA-FQ\n", mode=0o444))
    entries.append(Symlink(f"{group}/devices/{fn.bus_id}", f"../../../../devices/{fn.root.id}/{fn.bus_id}"))
    if fn.driver:
        entries.append(Symlink(f"{base}/driver", f"../../../bus/pci/drivers/{fn.driver}"))
        entries.append(
            Symlink(f"{BUS_DRIVERS}/{fn.driver}/{fn.bus_id}", f"../../../../devices/{fn.root.id}/{fn.bus_id}")
        )
    return entries


def sriov_entries(base: str, sriov: Sriov) -> list[Entry]:
    """A physical function's SR-IOV files (drivers/pci/iov.c), no VF enabled."""
    return [
        File(f"{base}/sriov_totalvfs", f"{sriov.total_vfs}\n", mode=0o444),
        File(f"{base}/sriov_numvfs", "0\n", mode=0o664),
        File(f"{base}/sriov_offset", f"{sriov.vf_offset}\n", mode=0o444),
        File(f"{base}/sriov_stride", f"{sriov.vf_stride}\n", mode=0o444),
        File(f"{base}/sriov_vf_device", f"{sriov.vf_device:x}\n", mode=0o444),
        File(f"{base}/sriov_drivers_autoprobe", "1\n", mode=0o644),
    ]


def driver_entries(driver: str) -> list[Entry]:
    """``/sys/bus/pci/drivers/<driver>``: what a registered PCI driver shows beside its device links."""
    base = f"{BUS_DRIVERS}/{driver}"
    return [
        Dir(base),
        Symlink(f"{base}/module", f"../../../../module/{driver}"),
        File(f"{base}/bind", "", mode=0o200),
        File(f"{base}/unbind", "", mode=0o200),
        File(f"{base}/new_id", "", mode=0o200),
        File(f"{base}/remove_id", "", mode=0o200),
        File(f"{base}/uevent", "", mode=0o200),
    ]


def root_complex_entries(root_id: str) -> list[Entry]:
    return [Dir(f"{SYS_DEVICES}/{root_id}"), File(f"{SYS_DEVICES}/{root_id}/uevent", "", mode=0o644)]


def resource_table(bars: tuple[Bar, ...]) -> str:
    by_index = {bar.index: bar for bar in bars}
    lines = []
    for index in range(RESOURCE_LINES):
        bar = by_index.get(index)
        if bar is None:
            # the upper half of a 64-bit BAR, unused BARs, no ROM, no SR-IOV
            lines.append(f"0x{0:016x} 0x{0:016x} 0x{0:016x}")
            continue
        flags = IORESOURCE_MEM | IORESOURCE_SIZEALIGN | bar.register_flags()
        if bar.prefetchable:
            flags |= IORESOURCE_PREFETCH
        if bar.is_64bit:
            flags |= IORESOURCE_MEM_64
        lines.append(f"0x{bar.address:016x} 0x{bar.address + bar.size - 1:016x} 0x{flags:016x}")
    return "\n".join(lines) + "\n"


def cpumask(cpus: list[int], nr_cpus: int) -> str:
    """A CPU set as the kernel's ``%*pb`` prints it: 32-bit hex groups, most significant first."""
    mask = 0
    for cpu in cpus:
        mask |= 1 << cpu
    groups = []
    remaining = max(nr_cpus, 1)
    while remaining > 0:
        width = remaining % 32 or 32
        groups.append(f"{(mask >> (remaining - width)) & ((1 << width) - 1):0{(width + 3) // 4}x}")
        remaining -= width
    return ",".join(groups)


def modalias(fn: PciFunction) -> str:
    f = fn.function
    return (
        f"pci:v{f.vendor:08X}d{f.device:08X}sv{f.subsystem_vendor:08X}sd{f.subsystem_device:08X}"
        f"bc{f.class_code >> 16:02X}sc{(f.class_code >> 8) & 0xFF:02X}i{f.class_code & 0xFF:02X}"
    )


def uevent(fn: PciFunction) -> str:
    f = fn.function
    lines = [f"DRIVER={fn.driver}"] if fn.driver else []
    lines += [
        f"PCI_CLASS={f.class_code:X}",
        f"PCI_ID={f.vendor:04X}:{f.device:04X}",
        f"PCI_SUBSYS_ID={f.subsystem_vendor:04X}:{f.subsystem_device:04X}",
        f"PCI_SLOT_NAME={fn.bus_id}",
        f"MODALIAS={modalias(fn)}",
    ]
    return "\n".join(lines) + "\n"
