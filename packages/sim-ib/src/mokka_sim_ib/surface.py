"""The ib surface: ConnectX HCAs in /sys/class/infiniband*, /dev/infiniband, and a MAD responder."""

from __future__ import annotations

from mokka_core.state import NodeState
from mokka_core.surface import Entry, Service, StageContext, Surface

from . import hca, sysfs


class IbSurface(Surface):
    name = "ib"

    def plan(self, node: NodeState, ctx: StageContext) -> list[Entry]:
        return sysfs.device_entries(node, hca.ports(node))

    def services(self, node: NodeState, ctx: StageContext) -> list[Service]:
        return []
