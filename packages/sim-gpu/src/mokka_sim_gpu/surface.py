"""Driver footprint of a simulated NVIDIA GPU node: NVML library chain, /dev/nvidia*, /proc/driver/nvidia, modules."""

from __future__ import annotations

from mokka_core.state import NodeState
from mokka_core.surface import Entry, StageContext, Surface


class GpuSurface(Surface):
    name = "gpu"

    def plan(self, node: NodeState, ctx: StageContext) -> list[Entry]:
        # Registered with the node daemon; rendering lands with its issue.
        return []
