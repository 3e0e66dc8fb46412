"""``apply(node, doc)``: an override document laid over a resolved node, the one way a node changes.

The daemon, ``mokka run`` and ``nvml-mock-ctl`` all resolve a node without its override and
then apply the override with this function, so they agree by construction.  Merge order (DESIGN
§1): override ``all`` < override ``devices[<index>]``; maps merge into blocks, scalars, lists and
null replace.  The document's values must be canonical (validated against the node: see
``resolve.canonical_override``, or produced by a ctl verb that checks them); this function checks
only the shape and names the key it cannot place.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import MokkaError
from ..schema.merge import merge_all
from .codec import blocks_of, decode, field_names, lists_of
from .config import GpuConfig
from .derive import derive
from .node import Gpu, Node, SurfaceSettings
from .value import defaults

Document = Mapping[str, Any]


class ApplyError(MokkaError):
    """The override does not fit the node (an unknown key, a block without its required values)."""


def apply(node: Node, doc: Document) -> Node:
    everyone = doc.get("all")
    devices = doc.get("devices") or {}
    gpus = tuple(_gpu_with(gpu, merge_all(everyone, devices.get(str(gpu.index)))) for gpu in node.gpus)
    surfaces = dict(node.surfaces)
    for name, patch in (doc.get("surfaces") or {}).items():
        current = surfaces.get(name, SurfaceSettings())
        surfaces[name] = current.replace(**{k: v for k, v in patch.items() if v is not None})
    return derive(node.replace(gpus=gpus, surfaces=surfaces), since=node)


def _gpu_with(gpu: Gpu, patch: Mapping[str, Any]) -> Gpu:
    if not patch:
        return gpu
    return gpu.replace(config=laid_over(gpu.config, patch, GpuConfig, f"devices.{gpu.index}"))


def laid_over(value: Any, patch: Mapping[str, Any], cls: type, path: str) -> Any:
    """``value`` (an instance of ``cls``, or None for a block the patch creates) with ``patch`` laid over it."""
    names = field_names(cls)
    blocks, lists = blocks_of(cls), lists_of(cls)
    values: dict[str, Any] = {} if value is None else {name: getattr(value, name) for name in names}
    for key, item in patch.items():
        where = f"{path}.{key}"
        if key not in names:
            raise ApplyError(f"{where}: unknown key")
        if key in blocks and isinstance(item, Mapping):
            values[key] = laid_over(values.get(key), item, blocks[key], where)
        elif item is None:
            values[key] = _default(cls, key)
        elif key in lists:
            values[key] = tuple(decode(lists[key], element) for element in item)
        elif isinstance(item, list):
            values[key] = tuple(item)
        else:
            values[key] = item
    try:
        return decode(cls, values) if value is None else cls(**values)
    except TypeError as exc:
        raise ApplyError(f"{path}: {exc}") from None


def _default(cls: type, name: str) -> Any:
    """What null means for a field: its default (a total block's fresh block), else None."""
    return defaults(cls).get(name)
