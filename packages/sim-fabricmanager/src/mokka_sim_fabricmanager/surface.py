"""Fabric manager of a simulated NVIDIA GPU node: fake nv-fabricmanager driving fabric state."""

from __future__ import annotations

from mokka_core.state import NodeState
from mokka_core.surface import Entry, StageContext, Surface


class FabricmanagerSurface(Surface):
    name = "fabricmanager"

    def plan(self, node: NodeState, ctx: StageContext) -> list[Entry]:
        # Registered with the node daemon; rendering lands with its issue.
        return []
