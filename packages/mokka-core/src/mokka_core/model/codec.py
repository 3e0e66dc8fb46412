"""The resolved node as JSON and back: what a node's snapshot holds, without pydantic.

:func:`encode` turns any resolved value (a node, a GPU configuration, one block) into plain JSON
data; :func:`decode` builds a resolved class from such data, applying the class's defaults to
absent keys and deriving the values ``DERIVED`` names where a block is built afresh.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from .config import (
    BLOCKS,
    LISTS,
    Bar1Memory,
    GpuConfig,
    Infiniband,
    Memory,
    ModulePowerLimits,
    Nvlink,
    Pcie,
    Power,
    System,
)
from .node import Gpu, Hca, Link, Node, NumaNode, RootComplex, SurfaceSettings, Switch
from .value import Value

T = TypeVar("T")

#: the node's own classes, in the same form as the configuration's BLOCKS / LISTS
NODE_BLOCKS: dict[type, dict[str, type]] = {
    Node: {"system": System, "nvlink": Nvlink, "infiniband": Infiniband},
    Gpu: {"config": GpuConfig},
}
NODE_LISTS: dict[type, dict[str, type]] = {
    Node: {"gpus": Gpu, "switches": Switch, "hcas": Hca, "root_complexes": RootComplex, "numa_nodes": NumaNode},
    Gpu: {"links": Link},
}
_BLOCKS = {**BLOCKS, **NODE_BLOCKS}
_LISTS = {**LISTS, **NODE_LISTS}


def field_names(cls: type) -> tuple[str, ...]:
    return cls.__slots__  # type: ignore[attr-defined, no-any-return]


def blocks_of(cls: type) -> Mapping[str, type]:
    return _BLOCKS.get(cls, {})


def lists_of(cls: type) -> Mapping[str, type]:
    return _LISTS.get(cls, {})


def encode(value: Any) -> Any:
    """Plain JSON data for a resolved value (Values become mappings, tuples lists)."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if isinstance(value, Value):
        return {name: encode(getattr(value, name)) for name in kind.__slots__}
    if isinstance(value, tuple | list):
        return [encode(item) for item in value]
    if isinstance(value, Mapping):
        return {key: encode(item) for key, item in value.items()}
    return value


_SCALARS = frozenset({str, int, float, bool, type(None)})


def encode_shared(node: Node) -> dict[str, Any]:
    """``encode(node)`` with each distinct GPU configuration written once (``configs``), its GPUs
    naming theirs by position: the GPUs of a board mostly share one, and decoding it once is what
    keeps reading a 72-GPU snapshot cheap.  :func:`decode` reads both forms."""
    configs: list[Any] = []
    position: dict[GpuConfig, int] = {}
    gpus = []
    for gpu in node.gpus:
        n = position.get(gpu.config)
        if n is None:
            n = position[gpu.config] = len(configs)
            configs.append(encode(gpu.config))
        gpus.append({name: n if name == "config" else encode(getattr(gpu, name)) for name in Gpu.__slots__})
    data = {name: encode(getattr(node, name)) for name in Node.__slots__ if name != "gpus"}
    return {**data, "gpus": gpus, "configs": configs}


def decode(cls: type[T], data: Mapping[str, Any]) -> T:
    """``cls`` built from JSON data (or a mix with resolved values); raises TypeError / KeyError /
    ValueError on data of another shape."""
    if cls is Node:
        shared = data.get("configs")
        data = {key: value for key, value in data.items() if key != "configs"}
        data["surfaces"] = {name: SurfaceSettings(**s) for name, s in data["surfaces"].items()}
        if shared is not None:
            configs = [decode(GpuConfig, config) for config in shared]
            data["gpus"] = [{**gpu, "config": configs[gpu["config"]]} if type(gpu.get("config")) is int else gpu
                            for gpu in data["gpus"]]
    values = dict(data)
    for key, block in blocks_of(cls).items():
        value = values.get(key)
        if type(value) is dict:
            values[key] = decode(block, value)
    for key, item_class in lists_of(cls).items():
        value = values.get(key)
        if value is not None:
            values[key] = tuple(item if isinstance(item, item_class) else decode(item_class, item) for item in value)
    for key, value in values.items():
        if type(value) is list:  # a tuple of scalars
            values[key] = tuple(value)
    derive = DERIVE.get(cls)
    if derive is not None:
        derive(values)
    return cls(**values)


def _pcie(values: dict[str, Any]) -> None:
    # a link trained below its maximum is what the document must say; otherwise it runs at the maximum
    values.setdefault("current_link_gen", values.get("max_link_gen", 4))
    values.setdefault("current_link_width", values.get("max_link_width", 16))


def _power(values: dict[str, Any]) -> None:
    default = values.get("default_limit_mw", 0)
    if values.get("enforced_limit_mw") is None:
        values["enforced_limit_mw"] = default
    if values.get("max_limit_mw") is None:
        values["max_limit_mw"] = default


def _memory(values: dict[str, Any]) -> None:
    total, reserved = values.get("total_bytes", 0), values.get("reserved_bytes", 0)
    used, free = values.get("used_bytes"), values.get("free_bytes")
    if used is None:
        used = max(0, total - reserved - free) if free is not None else 0
    values["used_bytes"] = used
    values["free_bytes"] = free if free is not None else max(0, total - reserved - used)


def _bar1(values: dict[str, Any]) -> None:
    total = values.get("total_bytes", 0)
    used, free = values.get("used_bytes"), values.get("free_bytes")
    if used is None:
        used = total - free if free is not None else 0
    values["used_bytes"] = used
    values["free_bytes"] = free if free is not None else max(0, total - used)


#: the values each block derives from its other fields when built from a document (``codegen.DERIVED``)
DERIVE: dict[type, Callable[[dict[str, Any]], None]] = {
    Pcie: _pcie, Power: _power, ModulePowerLimits: _power, Memory: _memory, Bar1Memory: _bar1,
}
