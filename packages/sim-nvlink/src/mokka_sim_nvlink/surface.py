"""The nvlink surface: NVLink surface of a simulated NVIDIA GPU node: link state, remote endpoints, cliques and cluster UUIDs in the NVML view."""

from __future__ import annotations

from mokka_core.state import NodeState
from mokka_core.surface import Entry, StageContext, Surface


class NvlinkSurface(Surface):
    name = "nvlink"

    def plan(self, node: NodeState, ctx: StageContext) -> list[Entry]:
        # Registered with the node daemon; rendering lands with its issue.
        return []
