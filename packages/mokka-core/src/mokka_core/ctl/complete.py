"""Fill the required fields a partial override block needs, from the node's current values.

The override model validates each bucket as a whole ``DeviceConfig``, whose blocks
have required fields (``power.default_limit_mw``, ``memory.total_bytes`` ...).  A
verb that changes one value of such a block (``power.current_draw_mw``) would be
refused, so before validation every block a bucket touches gets its missing
required fields copied from the GPU's current configuration; the effective value
of those fields does not change.
"""

from __future__ import annotations

import types
import typing
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

if TYPE_CHECKING:
    from ..state import NodeState


def complete(doc: dict[str, Any], node: NodeState) -> None:
    from ..profile import DeviceConfig

    if not node.gpus:
        return
    if isinstance(doc.get("all"), dict):
        _fill(doc["all"], DeviceConfig, node.gpus[0].config)
    for key, bucket in (doc.get("devices") or {}).items():
        if isinstance(bucket, dict) and str(key).isdigit() and int(key) < len(node.gpus):
            _fill(bucket, DeviceConfig, node.gpus[int(key)].config)


def _fill(data: dict[str, Any], model: type[BaseModel], current: BaseModel | None) -> None:
    for name, field in model.model_fields.items():
        value = data.get(name)
        sub = _model_of(field.annotation)
        if sub is None or not isinstance(value, dict):
            continue
        existing = getattr(current, name, None) if current is not None else None
        existing = existing if isinstance(existing, BaseModel) else None
        for required, sub_field in sub.model_fields.items():
            if sub_field.is_required() and required not in value and existing is not None:
                current_value = getattr(existing, required)
                value[required] = current_value.model_dump() if isinstance(current_value, BaseModel) else current_value
        _fill(value, sub, existing)


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _model_of(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = _model_of(arg)
            if found is not None:
                return found
    return None
