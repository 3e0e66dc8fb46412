"""The cdi surface: ``/var/run/cdi/nvidia.yaml`` for CDI-aware container runtimes (MIG devices included:
the partition the NVML library keeps, re-staged whenever it changes).

Healthy, every device node it names is the one the gpu surface stages under the root.
Failed, it names device nodes under a driver root that does not exist, so a runtime
refuses to start containers that ask for a GPU (as after the driver went away).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from mokka_core.stage.surface import Entry, File, StageContext, Surface

if TYPE_CHECKING:
    from mokka_core.model.node import Node


class CdiSurface(Surface):
    name = "cdi"
    #: a GPU's configuration changes nothing here (faults, metrics): only the node's GPUs and settings do
    reads = frozenset[str]()

    def render(self, node: Node, ctx: StageContext) -> dict[str, Any]:
        from . import spec as cdi  # mig_partition: imported where a spec is rendered, not by every nvml-mock-ctl

        return cdi.render(node, ctx.root, failed=node.surface(self.name).state == "failed", mig=ctx.mig)

    def plan(self, node: Node, ctx: StageContext) -> list[Entry]:
        from . import spec as cdi

        return [File(cdi.SPEC_FILE, cdi.dump(self.render(node, ctx)))]

    def check(self, node: Node, ctx: StageContext) -> list[str]:
        from . import spec as cdi

        problems = super().check(node, ctx)
        if node.surface(self.name).state == "failed":
            present = [p for p in cdi.device_host_paths(self.render(node, ctx))
                       if Path(p).exists() and "/dev/nvidia" in p and p.rsplit("nvidia", 1)[1].isdigit()]
            problems += [f"{self.name}: failed spec names {path}, which exists" for path in present]
        return problems
