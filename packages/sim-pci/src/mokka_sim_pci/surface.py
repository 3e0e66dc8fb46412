"""The pci surface: the node's GPUs, NVSwitches and HCAs in the PCI sysfs tree, with the platform they sit on.

The platform is the machine's NUMA nodes (``/sys/devices/system/node``, the CPUs the functions'
``local_cpulist`` name) and its DMI identity (``/sys/class/dmi/id``), whatever the surface's state.

Reads the gpu and ib surface settings from the node state (never from those packages): the
``driver`` links exist only while the surface that would bind the function is enabled and
healthy.  States:

- enabled, healthy: every function present, config space as the profile describes it.
- enabled, failed: every function present, but none answers: ``config`` reads all ``0xff``,
  current link speed ``Unknown`` and width 63; the attributes the kernel cached at
  enumeration (vendor, device, class, subsystem ids, irq) keep their values.  lspci shows the
  devices with ``(rev ff)`` and ``Unknown header type 7f``, exactly like a GPU that fell off
  the bus.  A lost or fallen-off-bus GPU reads like that on a healthy node too.
- disabled: nothing staged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mokka_core.stage.surface import Dir, Entry, StageContext, Surface

if TYPE_CHECKING:
    from mokka_core.model.node import Node


class PciSurface(Surface):
    name = "pci"
    #: ids, link, BAR sizes, SR-IOV; a GPU fallen off the bus reads all ones; a coherent Grace GPU's memory node
    reads = frozenset({"architecture", "bar1_memory", "failure", "grace_superchip", "memory", "pci", "pcie", "sriov"})

    def plan(self, node: Node, ctx: StageContext) -> list[Entry]:
        if not node.surface("pci").enabled:
            return []
        return render_pci_tree(node)


def render_pci_tree(node: Node) -> list[Entry]:
    # the renderers load where a plan is built: nvml-mock-ctl loads every surface, builds only the plans a change reads
    from .devices import MLX5_DRIVER, NVIDIA_DRIVER, cpu_count, pci_functions
    from .dmi import dmi_entries
    from .numa_nodes import numa_node_entries
    from .sysfs import BUS_DEVICES, MOUNT_POINTS, driver_entries, function_entries, root_complex_entries

    functions = pci_functions(node)
    nr_cpus = cpu_count(node)
    entries: list[Entry] = [Dir(BUS_DEVICES), *(Dir(path) for path in MOUNT_POINTS)]
    entries += numa_node_entries(node, nr_cpus)
    if node.system.dmi is not None:
        entries += dmi_entries(node.system.dmi)
    for root_id in sorted({fn.root.id for fn in functions}):
        entries += root_complex_entries(root_id)
    if node.surface("gpu").active:
        entries += driver_entries(NVIDIA_DRIVER)
    if node.surface("ib").active and any(fn.kind == "hca" for fn in functions):
        entries += driver_entries(MLX5_DRIVER)
    for fn in functions:
        entries += function_entries(fn, nr_cpus)
    return entries
