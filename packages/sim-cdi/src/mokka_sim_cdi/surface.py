"""The cdi surface: CDI spec of a simulated NVIDIA GPU node: /var/run/cdi/nvidia.yaml for container runtimes."""

from __future__ import annotations

from mokka_core.state import NodeState
from mokka_core.surface import Entry, StageContext, Surface


class CdiSurface(Surface):
    name = "cdi"

    def plan(self, node: NodeState, ctx: StageContext) -> list[Entry]:
        # Registered with the node daemon; rendering lands with its issue.
        return []
