"""The ib surface: ConnectX HCAs in /sys/class/infiniband*, /dev/infiniband, and a MAD responder."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from mokka_core.stage.store import IB_DIR
from mokka_core.stage.surface import Dir, Entry, File, Service, StageContext, Surface

if TYPE_CHECKING:
    from mokka_core.model.node import Node


class IbSurface(Surface):
    name = "ib"
    #: a GPU's configuration changes nothing here (faults, metrics): only the node's GPUs and settings do
    reads = frozenset[str]()

    def plan(self, node: Node, ctx: StageContext) -> list[Entry]:
        # loaded where a plan is built: nvml-mock-ctl loads every surface, builds only the plans a change reads
        from . import config, hca, sysfs

        views = hca.ports(node)
        if not views:
            return []
        node_file = config.node_config(node, views).to_json()
        return [
            *sysfs.device_entries(node, views),
            Dir(IB_DIR),
            File(config.NODE_CONFIG, node_file, mode=0o644),
        ]

    def services(self, node: Node, ctx: StageContext) -> list[Service]:
        from . import hca

        if not hca.ports(node):
            return []
        command = [sys.executable, "-m", "mokka_sim_ib", "respond", "--root", str(ctx.root)]
        return [Service(name="sim-ib-responder", command=command)]
