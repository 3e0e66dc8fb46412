"""Fill the required fields a partial override block needs, from the node's current values.

The override model validates each bucket as a whole ``DeviceConfig``, whose blocks
have required fields (``power.default_limit_mw``, ``memory.total_bytes`` ...).  A
verb that changes one value of such a block (``power.current_draw_mw``) would be
refused, so before validation every block a bucket touches gets its missing
required fields copied from the GPU's current configuration; the effective value
of those fields does not change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..model.records import plain
from ..model.shapes import Shapes, fill_required

if TYPE_CHECKING:
    from ..model.records import NodeRecord
    from ..model.resolve import NodeState


def complete(doc: dict[str, Any], node: NodeState | NodeRecord, shapes: Shapes) -> None:
    if not node.gpus:
        return
    if isinstance(doc.get("all"), dict):
        fill_required(doc["all"], plain(node.gpus[0].config), shapes)
    for key, bucket in (doc.get("devices") or {}).items():
        if isinstance(bucket, dict) and str(key).isdigit() and int(key) < len(node.gpus):
            fill_required(bucket, plain(node.gpus[int(key)].config), shapes)
