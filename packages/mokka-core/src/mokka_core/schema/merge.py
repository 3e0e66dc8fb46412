"""The one merge rule used for every layer: maps merge recursively; scalars, lists and null replace."""

from __future__ import annotations

import copy
from typing import Any


def deep_merge(base: Any, patch: Any) -> Any:
    """Return ``base`` with ``patch`` laid over it; neither argument is modified."""
    if isinstance(base, dict) and isinstance(patch, dict):
        merged = {key: copy.deepcopy(value) for key, value in base.items()}
        for key, value in patch.items():
            merged[key] = deep_merge(base[key], value) if key in base else copy.deepcopy(value)
        return merged
    return copy.deepcopy(patch)


def merge_all(*layers: Any) -> Any:
    result: Any = {}
    for layer in layers:
        if layer is not None:
            result = deep_merge(result, layer)
    return result
