"""The pci surface. PCI sysfs tree of a simulated NVIDIA GPU node: GPUs, NVSwitches and HCAs with config space."""

from __future__ import annotations

from mokka_core.state import NodeState
from mokka_core.surface import Entry, StageContext, Surface


class PciSurface(Surface):
    name = "pci"

    def plan(self, node: NodeState, ctx: StageContext) -> list[Entry]:
        # Registered with the node daemon; rendering lands with its issue.
        return []
