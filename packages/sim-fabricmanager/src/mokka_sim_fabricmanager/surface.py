"""The fabricmanager surface: a fake nv-fabricmanager whose readiness drives fabric state ``auto``.

Nothing of the real fabric manager is visible as files except what it produces, so the
plan is only the run directory its marker lives in; the daemon is the surface.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from mokka_core.stage.store import FABRICMANAGER_READY, RUN_DIR
from mokka_core.stage.surface import Dir, Entry, Service, StageContext, Surface

if TYPE_CHECKING:
    from mokka_core.model.node import Node


class FabricmanagerSurface(Surface):
    name = "fabricmanager"
    #: a GPU's configuration changes nothing here (faults, metrics): only the node's GPUs and settings do
    reads = frozenset[str]()

    def plan(self, node: Node, ctx: StageContext) -> list[Entry]:
        return [Dir(RUN_DIR)]

    def services(self, node: Node, ctx: StageContext) -> list[Service]:
        command = [sys.executable, "-m", "mokka_sim_fabricmanager.daemon", "--root", str(ctx.root)]
        if node.surface(self.name).state == "failed":  # runs, but the fabric never trains
            return [Service(name="nv-fabricmanager", command=[*command, "--failed"])]
        return [Service(name="nv-fabricmanager", command=command, ready_path=FABRICMANAGER_READY)]
