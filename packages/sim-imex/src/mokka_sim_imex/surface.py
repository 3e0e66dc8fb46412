"""The imex surface. IMEX surface of a simulated NVIDIA GPU node: channel devices, capabilities, fake nvidia-imex."""

from __future__ import annotations

from mokka_core.state import NodeState
from mokka_core.surface import Entry, StageContext, Surface


class ImexSurface(Surface):
    name = "imex"

    def plan(self, node: NodeState, ctx: StageContext) -> list[Entry]:
        # Registered with the node daemon; rendering lands with its issue.
        return []
