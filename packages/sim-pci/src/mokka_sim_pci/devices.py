"""The PCI functions of a node (GPUs, NVSwitches, HCAs), derived from the node state alone.

Everything the sysfs renderer needs per function is decided here: ids, class, link, BARs,
IRQ, NUMA placement, IOMMU group, which driver is bound and whether it still answers.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from mokka_core.model.identity import gpu_dma_bits, legacy_irq
from mokka_core.model.numa import parse_cpulist

from .config_space import Bar, Function, Link, Sriov

if TYPE_CHECKING:
    from mokka_core.model.config import Sriov as SriovConfig
    from mokka_core.model.node import Gpu, Hca, Node, RootComplex, Switch

NVIDIA_VENDOR = 0x10DE
MELLANOX_VENDOR = 0x15B3

CLASS_3D_CONTROLLER = 0x030200
CLASS_BRIDGE_OTHER = 0x068000  # how NVSwitch functions enumerate
CLASS_INFINIBAND = 0x020700

NVIDIA_DRIVER = "nvidia"
MLX5_DRIVER = "mlx5_core"

#: ConnectX generations by PCI device id -> PCIe generation of their host link.
HCA_LINK_GEN = {0x1017: 3, 0x1019: 4, 0x101B: 4, 0x101D: 4, 0x1021: 5, 0x1023: 6}
#: An NVSwitch's host PCIe link is a narrow management link, not a data path.
HCA_SUBSYSTEM_DEVICE = 0x0041  # Mellanox's subsystem id of its own-brand adapters
SWITCH_LINK = Link(max_gen=4, max_width=2, current_gen=4, current_width=2)

# MMIO layout: every function gets its own slot, so addresses never overlap on one node
MMIO32_BASE = 0x8000_0000
MMIO32_SLOT = 0x0200_0000
MMIO32_SLOTS = 56  # 0x8000_0000 .. 0xf000_0000
MMIO64_BASE = 0x2000_0000_0000
IOMMU_GROUP_BASE = 40  # above the groups of a host's own root ports and chipset functions


class PciFunction(NamedTuple):
    bus_id: str
    root: RootComplex
    kind: str  # "gpu" | "nvswitch" | "hca"
    function: Function
    numa_node: int  # -1 when the platform reports no NUMA affinity
    cpulist: str
    driver: str | None
    responding: bool
    iommu_group: int
    dma_bits: int


def pci_functions(node: Node) -> list[PciFunction]:
    """Every function the pci surface shows, sorted by bus id (the order lspci lists them)."""
    wanted: list[tuple[str, Callable[[], PciFunction]]] = []
    layout = _Layout(node)
    wanted += [(gpu.bus_id, functools.partial(_gpu, node, gpu, layout)) for gpu in node.gpus]
    wanted += [(switch.bus_id, functools.partial(_switch, node, switch, layout))
               for switch in node.switches if switch.pci_visible and switch.root_complex]
    wanted += [(hca.bus_id, functools.partial(_hca, node, hca, layout)) for hca in node.hcas]
    wanted.sort(key=lambda item: item[0])
    return [make() for _, make in wanted]  # in bus order: the layout hands out slots in call order


class _Layout:
    """Hands out non-overlapping MMIO windows and IOMMU groups, one slot per function in bus order."""

    def __init__(self, node: Node) -> None:
        self.roots = {root.id: root for root in node.root_complexes}
        self.slot = -1
        self.mmio64 = MMIO64_BASE

    def next_slot(self) -> tuple[int, int]:
        """(32-bit BAR address, IOMMU group) of the next function."""
        self.slot += 1
        return MMIO32_BASE + (self.slot % MMIO32_SLOTS) * MMIO32_SLOT, IOMMU_GROUP_BASE + self.slot

    def take64(self, size: int) -> int:
        address = self.mmio64
        self.mmio64 += size
        return address


def _gpu(node: Node, gpu: Gpu, layout: _Layout) -> PciFunction:
    bound = node.surface("gpu").active
    cfg = gpu.config
    pci, pcie = cfg.pci, cfg.pcie
    bar0, group = layout.next_slot()
    bar1_size = _pow2(cfg.bar1_memory.total_bytes if cfg.bar1_memory else 256 << 20)
    bar1 = layout.take64(2 * bar1_size)
    subsystem = pci.subsystem_id
    link = Link(max_gen=pcie.max_link_gen, max_width=pcie.max_link_width, current_gen=pcie.current_link_gen,
                current_width=pcie.current_link_width)
    function = Function(
        vendor=NVIDIA_VENDOR,
        device=pci.device_id >> 16,  # NVML packs device << 16 | vendor
        subsystem_vendor=subsystem & 0xFFFF,
        subsystem_device=subsystem >> 16,
        revision=pci.revision,
        class_code=CLASS_3D_CONTROLLER,
        irq=legacy_irq(gpu.bus_id),
        link=link,
        bars=(
            Bar(0, bar0, 16 << 20, is_64bit=False, prefetchable=False),
            Bar(1, bar1, bar1_size, is_64bit=True, prefetchable=True),
            Bar(3, bar1 + bar1_size, 32 << 20, is_64bit=True, prefetchable=True),
        ),
        msix_vectors=6,
        driver_bound=bound,
        sriov=_sriov(cfg.sriov),
    )
    root = layout.roots[gpu.root_complex]
    return PciFunction(
        bus_id=gpu.bus_id,
        root=root,
        kind="gpu",
        function=function,
        numa_node=gpu.numa_node if gpu.numa_node is not None else -1,
        cpulist=gpu.cpu_affinity or root.cpu_affinity,
        driver=NVIDIA_DRIVER if bound else None,
        responding=node.surface("pci").state == "healthy" and not gpu.lost,
        iommu_group=group,
        dma_bits=gpu_dma_bits(cfg.architecture),
    )


def _sriov(sriov: SriovConfig) -> Sriov | None:
    if not sriov.total_vfs:
        return None
    return Sriov(total_vfs=sriov.total_vfs, vf_offset=sriov.vf_offset, vf_stride=sriov.vf_stride,
                 vf_device=sriov.vf_device_id)


def _switch(node: Node, switch: Switch, layout: _Layout) -> PciFunction:
    bound = node.surface("gpu").active  # nvidia.ko drives NVSwitches too
    bar0, group = layout.next_slot()
    assert switch.root_complex is not None  # only PCI-visible switches get here
    root = layout.roots[switch.root_complex]
    function = Function(
        vendor=NVIDIA_VENDOR,
        device=switch.device_id,
        subsystem_vendor=NVIDIA_VENDOR,
        subsystem_device=switch.device_id,
        revision=0xA1,
        class_code=CLASS_BRIDGE_OTHER,
        irq=legacy_irq(switch.bus_id),
        link=SWITCH_LINK,
        bars=(Bar(0, bar0, 32 << 20, is_64bit=False, prefetchable=False),),
        msix_vectors=64,
        driver_bound=bound,
    )
    return PciFunction(
        bus_id=switch.bus_id,
        root=root,
        kind="nvswitch",
        function=function,
        numa_node=switch.numa_node if switch.numa_node is not None else -1,
        cpulist=root.cpu_affinity,
        driver=NVIDIA_DRIVER if bound else None,
        responding=node.surface("pci").state == "healthy",
        iommu_group=group,
        dma_bits=47,
    )


def _hca(node: Node, hca: Hca, layout: _Layout) -> PciFunction:
    bound = node.surface("ib").active
    _, group = layout.next_slot()
    root = layout.roots[hca.root_complex]
    gen = HCA_LINK_GEN.get(hca.device_id, 4)
    function = Function(
        vendor=MELLANOX_VENDOR,
        device=hca.device_id,
        subsystem_vendor=MELLANOX_VENDOR,
        subsystem_device=HCA_SUBSYSTEM_DEVICE,
        revision=0x00,
        class_code=CLASS_INFINIBAND,
        irq=legacy_irq(hca.bus_id),
        link=Link(gen, 16, gen, 16),
        bars=(Bar(0, layout.take64(64 << 20), 32 << 20, is_64bit=True, prefetchable=True),),
        msix_vectors=64,
        driver_bound=bound,
    )
    return PciFunction(
        bus_id=hca.bus_id,
        root=root,
        kind="hca",
        function=function,
        numa_node=hca.numa_node,
        cpulist=root.cpu_affinity,
        driver=MLX5_DRIVER if bound else None,
        responding=node.surface("pci").state == "healthy",
        iommu_group=group,
        dma_bits=64,
    )


def cpu_count(node: Node) -> int:
    """nr_cpu_ids as the node's CPU lists imply it (highest CPU of its NUMA nodes + 1)."""
    return max(max(parse_cpulist(numa.cpus)) for numa in node.numa_nodes) + 1


def _pow2(size: int) -> int:
    return 1 << max(size - 1, 1).bit_length()
