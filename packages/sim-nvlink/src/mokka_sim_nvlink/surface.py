"""The nvlink surface: NVLink lives in NVML only, so this surface stages no files.

Its settings shape the node state (``mokka_core.model.resolve``: failed -> every link inactive,
disabled -> no links); it contributes the links, the NV# matrix and the NVLink error clocks to the
NVML state file the gpu surface writes (``nvml``).  ``check`` verifies that the staged NVML view
shows them and this node's fabric placement.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mokka_core.stage.surface import Entry, NvmlKeys, StageContext, Surface

if TYPE_CHECKING:
    from mokka_core.model.node import Node


class NvlinkSurface(Surface):
    name = "nvlink"
    #: of a GPU's configuration only the NVLink error clocks and a peer's PCI device id, for the NVML keys
    #: (links follow the node's GPUs and settings; the plan is empty)
    reads = frozenset({"nvlink_error", "pci"})

    def plan(self, node: Node, ctx: StageContext) -> list[Entry]:
        return []  # real nodes have no NVLink files (no sysfs, no /dev): see nvml() and check()

    def nvml(self, node: Node, ctx: StageContext) -> NvmlKeys:
        from .nvml import nvml_keys

        return nvml_keys(node, ctx.booted_ms)

    def check(self, node: Node, ctx: StageContext) -> list[str]:
        from mokka_core.stage import nvml_keys as keys
        from mokka_core.stage.paths import NVML_STATE_FILE

        from . import statefile
        from .topology import fabric_placement, nv_matrix

        try:
            values = statefile.read(ctx.root / NVML_STATE_FILE)
        except statefile.StateFileError as exc:
            return [f"{self.name}: NVML view: {exc}"]
        problems = []
        if statefile.device_count(values) != len(node.gpus):
            problems.append(f"{self.name}: NVML view has {statefile.device_count(values)} GPUs, node has "
                            f"{len(node.gpus)}")
            return problems
        matrix = nv_matrix(node)
        placement = fabric_placement(node)
        for gpu in node.gpus:
            count = int(statefile.device_value(values, gpu.index, keys.DEVICE_NVLINK_COUNT) or 0)
            if count != len(gpu.links):
                problems.append(f"{self.name}: GPU {gpu.index}: NVML view has {count} links, node has {len(gpu.links)}")
                continue
            for link in gpu.links:
                shown = statefile.link_value(values, gpu.index, link.link, keys.LINK_STATE) == "1"
                if shown != link.active:
                    problems.append(f"{self.name}: GPU {gpu.index} link {link.link}: NVML view says "
                                    f"{'active' if shown else 'inactive'}, node says "
                                    f"{'active' if link.active else 'inactive'}")
            expected_row = ",".join(str(n) for n in matrix[gpu.index])
            row = statefile.device_value(values, gpu.index, keys.DEVICE_TOPOLOGY_NVLINKS)
            if gpu.links and row is not None and row != expected_row:
                problems.append(f"{self.name}: GPU {gpu.index}: NV# row {row} in the NVML view, {expected_row} "
                                "in the node state")
            if placement is not None:
                shown_place = (statefile.device_value(values, gpu.index, keys.DEVICE_FABRIC_CLUSTER_UUID),
                               statefile.device_value(values, gpu.index, keys.DEVICE_FABRIC_CLIQUE_ID))
                if shown_place != (placement[0], str(placement[1])):
                    problems.append(f"{self.name}: GPU {gpu.index}: fabric cluster/clique {shown_place} in the "
                                    f"NVML view, {placement} in the node state")
        return problems
