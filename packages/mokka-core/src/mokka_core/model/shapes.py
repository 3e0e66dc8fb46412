"""The shape of a GPU's configuration as plain data: its blocks, their fields, defaults and required fields.

``device_shapes()`` reads it off the pydantic ``DeviceConfig`` model once; the result is JSON
(stored in a node's snapshot) and the functions below use it without pydantic:

* :func:`fill_required` gives a partial override block the required fields it lacks, copied from
  the GPU's current values (``power: {current_draw_mw: ...}`` needs ``default_limit_mw`` to validate);
* :func:`lay_over` lays override buckets over a validated configuration exactly as validating the
  merged layers would, filling the defaults of a block the override creates, and raises
  :class:`NotFast` where only the full validation can tell (an unknown key, a block whose required
  fields are missing).

Paths are dotted field names from the configuration's top (``""``); ``name[]`` is an item of a list
of blocks (``xid_events[]``).
"""

from __future__ import annotations

import copy
import functools
from typing import Any

Shapes = dict[str, dict[str, Any]]  # path -> {"fields": [...], "required": [...], "defaults": {...}}


class NotFast(Exception):
    """The change needs the full resolve with pydantic validation."""


def join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


@functools.cache
def device_shapes() -> Shapes:
    """Every block of ``DeviceConfig`` (imports pydantic)."""
    from ..schema.loader import _nested_model
    from ..schema.profile import DeviceConfig

    shapes: Shapes = {}

    def walk(model: Any, path: str) -> None:
        fields, required, defaults = [], [], {}
        for name, field in model.model_fields.items():
            fields.append(name)
            if field.is_required():
                required.append(name)
            else:
                defaults[name] = _as_json(field.get_default(call_default_factory=True))
            nested = _nested_model(field.annotation)
            if nested is not None:
                kind, sub = nested
                if kind == "model":
                    walk(sub, join(path, name))
                elif kind == "list":
                    walk(sub, join(path, name) + "[]")
                # a mapping of blocks has no shape: a change inside one takes the full path
        shapes[path] = {"fields": fields, "required": required, "defaults": defaults}

    walk(DeviceConfig, "")
    return shapes


def _as_json(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, (list, tuple)):
        return [_as_json(item) for item in value]
    if isinstance(value, dict):
        return {key: _as_json(item) for key, item in value.items()}
    return value


def fill_required(bucket: dict[str, Any], current: dict[str, Any] | None, shapes: Shapes, path: str = "") -> None:
    """Copy into every block of ``bucket`` the required fields it lacks from ``current`` (the GPU's values)."""
    for name, value in bucket.items():
        sub = join(path, name)
        if sub not in shapes or not isinstance(value, dict):
            continue
        existing = current.get(name) if isinstance(current, dict) else None
        if isinstance(existing, dict):
            for required in shapes[sub]["required"]:
                if required not in value and required in existing:
                    value[required] = copy.deepcopy(existing[required])
        fill_required(value, existing if isinstance(existing, dict) else None, shapes, sub)


def lay_over(base: Any, patch: Any, shapes: Shapes, path: str = "") -> Any:
    """``base`` (a validated configuration, as JSON) with ``patch`` laid over it; neither is modified."""
    if isinstance(patch, dict):
        shape = shapes.get(path)
        if shape is None:
            raise NotFast(f"{path or 'the configuration'} is not a block")
        fresh = not isinstance(base, dict)
        merged = copy.deepcopy(shape["defaults"]) if fresh else dict(base)
        for key, value in patch.items():
            if key not in shape["fields"]:
                raise NotFast(f"unknown key {join(path, key)}")
            merged[key] = lay_over(merged.get(key), value, shapes, join(path, key))
        missing = [name for name in shape["required"] if name not in merged]
        if missing:
            raise NotFast(f"{path} lacks {', '.join(missing)}")
        return merged
    if isinstance(patch, list):
        item = path + "[]"
        if item not in shapes:
            return copy.deepcopy(patch)
        if not all(isinstance(element, dict) for element in patch):
            raise NotFast(f"{path} holds blocks")
        return [lay_over(None, element, shapes, item) for element in patch]
    return patch
