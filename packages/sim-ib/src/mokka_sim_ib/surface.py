"""The ib surface. InfiniBand surface of a simulated NVIDIA GPU node: ConnectX HCAs in sysfs and /dev/infiniband."""

from __future__ import annotations

from mokka_core.state import NodeState
from mokka_core.surface import Entry, StageContext, Surface


class IbSurface(Surface):
    name = "ib"

    def plan(self, node: NodeState, ctx: StageContext) -> list[Entry]:
        # Registered with the node daemon; rendering lands with its issue.
        return []
