"""The fabricmanager surface: a fake nv-fabricmanager whose readiness drives fabric state ``auto``.

Nothing of the real fabric manager is visible as files except what it produces, so the plan is only
the run directory its marker lives in; the daemon (a native program, see ``daemon``) is the surface.
Its keys in the NVML state file (``nvml``) are the fabric state of every fabric GPU, as a real node
shows it: fabric manager healthy -> the library follows the daemon's readiness marker (In Progress,
then Completed); failed (daemon up, the fabric never trains) -> In Progress; disabled (no fabric
manager on a fabric node) -> Not Started. A state the profile gives explicitly is shown as given.
"""

from __future__ import annotations

import os
from types import MappingProxyType
from typing import TYPE_CHECKING

from mokka_core.stage.nvml_view import FABRIC_STATE
from mokka_core.stage.paths import LIB_DIR
from mokka_core.stage.store import FABRICMANAGER_READY, RUN_DIR, NodeStore
from mokka_core.stage.surface import Dir, Entry, NvmlKeys, Service, StageContext, Surface

from .daemon import PROGRAM, binary

if TYPE_CHECKING:
    from mokka_core.model.node import Node


class FabricmanagerSurface(Surface):
    name = "fabricmanager"
    #: of a GPU's configuration only its fabric block, for the NVML keys (the plan reads none of it)
    reads = frozenset({"fabric"})

    def plan(self, node: Node, ctx: StageContext) -> list[Entry]:
        return [Dir(RUN_DIR)]

    def services(self, node: Node, ctx: StageContext) -> list[Service]:
        command = [str(binary()), "--root", str(ctx.root)]
        if node.surface(self.name).state == "failed":  # runs, but the fabric never trains
            return [Service(name=PROGRAM, command=[*command, "--failed"])]
        return [Service(name=PROGRAM, command=command, ready_path=FABRICMANAGER_READY)]

    def nvml(self, node: Node, ctx: StageContext) -> NvmlKeys:
        settings = node.surface(self.name)
        fabrics = [(gpu.index, gpu.config.fabric) for gpu in node.gpus if gpu.config.fabric is not None]
        follows = settings.enabled and settings.active and any(fabric.state == "auto" for _, fabric in fabrics)
        system: tuple[tuple[str, object], ...] = ()
        if follows:
            # relative to the state file's directory: the library finds the node's marker wherever the root is
            # mounted (a container given the root at /opt/mokka as well as the host)
            state_dir = ctx.root.absolute() / LIB_DIR
            ready_file = os.path.relpath(NodeStore(ctx.root.absolute()).fabricmanager_ready, state_dir)
            if "\n" in ready_file or len(ready_file) >= 512:
                raise ValueError(f"root {ctx.root}: not usable in the NVML state file (line break, or path too long)")
            system = (("fabric_ready_file", ready_file),)
        devices = {}
        for index, fabric in fabrics:
            state = fabric.state
            if state != "auto":
                shown: tuple[tuple[str, object], ...] = (("fabric.state", FABRIC_STATE[state]),)
            elif not settings.enabled:
                shown = (("fabric.state", FABRIC_STATE["not_started"]),)
            elif not follows:
                shown = (("fabric.state", FABRIC_STATE["in_progress"]),)
            else:
                shown = (("fabric.state", FABRIC_STATE["in_progress"]), ("fabric.auto", 1))
            devices[index] = shown
        return NvmlKeys(system=system, devices=MappingProxyType(devices))
