"""NVLink surface of a simulated NVIDIA GPU node: links, remote endpoints, cliques, cluster UUIDs."""

from __future__ import annotations

from mokka_core.state import NodeState
from mokka_core.surface import Entry, StageContext, Surface


class NvlinkSurface(Surface):
    name = "nvlink"

    def plan(self, node: NodeState, ctx: StageContext) -> list[Entry]:
        # Registered with the node daemon; rendering lands with its issue.
        return []
