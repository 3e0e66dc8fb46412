"""The installed surfaces as ``discover`` finds them, kept in Mokka's cache while what it reads is unchanged:
``importlib.metadata`` alone costs ``mokka run`` some 15 ms to import.

An entry (``surfaces/<digest of sys.path>.json``) holds ``discover``'s answer, each class by its import
path, with the fingerprint of what the path finder reads to list entry points: for each ``sys.path``
entry, the names of the distributions in it (``*.dist-info``, ``*.egg-info``, ``*.egg``) and each one's
``entry_points.txt``.  Where distributions could come from elsewhere (a zip on ``sys.path``, a finder
besides the path finder that finds distributions) nothing is kept.  An entry is used only while those
are unchanged and its classes import as surfaces; anything else asks ``discover`` and replaces it.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from ..stage.paths import user_cache
from ..stage.surface import Surface, discover
from .resolved import load_record, save_record

FORMAT_VERSION = 1
CACHE_DIR = "surfaces"
MAX_ENTRIES = 16
DISTRIBUTIONS = (".dist-info", ".egg-info", ".egg")
ENTRY_POINTS = ("entry_points.txt", "EGG-INFO/entry_points.txt")


def installed() -> dict[str, type[Surface]]:
    """Every installed surface by name, as ``discover`` returns them."""
    sources = _sources()
    path = user_cache(CACHE_DIR) / f"{hashlib.sha256(json.dumps(sys.path).encode()).hexdigest()[:32]}.json"
    if sources is not None:
        found = _load(path, sources)
        if found is not None:
            return found
    found = discover()
    if sources is not None:
        save_record(path, FORMAT_VERSION, {
            "sources": sources,
            "surfaces": {name: f"{cls.__module__}:{cls.__qualname__}" for name, cls in found.items()}}, MAX_ENTRIES)
    return found


def _sources() -> list[Any] | None:
    """What the path finder reads to list distributions and their entry points (None: not only it)."""
    from importlib.machinery import PathFinder

    if any(finder is not PathFinder and hasattr(finder, "find_distributions") for finder in sys.meta_path):
        return None
    sources: list[Any] = []
    for entry in sys.path:
        try:
            names = sorted(name for name in os.listdir(entry or ".") if name.endswith(DISTRIBUTIONS))
        except NotADirectoryError:  # a zip: its distributions are not listed by name
            return None
        except OSError:
            sources.append([entry, None])
            continue
        sources.append([entry, [[name, *_stamps(os.path.join(entry or ".", name))] for name in names]])
    return sources


def _stamps(distribution: str) -> list[Any]:
    stamps: list[Any] = []
    for name in ENTRY_POINTS:
        try:
            st = os.stat(os.path.join(distribution, name))
            stamps.append([st.st_ino, st.st_size, st.st_mtime_ns])
        except OSError:
            stamps.append(None)
    return stamps


def _load(path: Path, sources: list[Any]) -> dict[str, type[Surface]] | None:
    try:
        data = load_record(path, FORMAT_VERSION)
        if data is None or data.get("sources") != sources:
            return None
        found: dict[str, type[Surface]] = {}
        for name, target in data["surfaces"].items():
            module, _, qualname = target.partition(":")
            cls: Any = importlib.import_module(module)
            for part in qualname.split("."):
                cls = getattr(cls, part)
            if not (isinstance(cls, type) and issubclass(cls, Surface)):
                return None
            found[name] = cls
        return dict(sorted(found.items()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError, ImportError):
        return None
