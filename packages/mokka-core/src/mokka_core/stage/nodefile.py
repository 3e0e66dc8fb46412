"""The node file: which NodeSpec a staged root was built from, so later commands need no flags.

``mokka node up`` and ``mokka run`` write it (:attr:`.store.NodeStore.node_file`);
``nvml-mock-ctl``, ``mokka node status`` and re-renders read it back.  Paths
inside it are absolute; the override and overlay default to the files under the
root's state directory.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Any

from ..errors import ConfigError, MokkaError
from ..model.node import DEFAULT_NODE_NAME
from ..model.spec import NodeSpec
from .store import NodeStore, atomic_write

FORMAT_VERSION = 1


def save(root: Path, spec: NodeSpec, booted_ms: int | None = None) -> Path:
    """Record ``spec`` and when the node came up (wall-clock ms, the origin of its fault clocks; default now)."""
    path = NodeStore(root).node_file
    path.parent.mkdir(parents=True, exist_ok=True)
    data: dict[str, Any] = {
        "version": FORMAT_VERSION,
        "profile": spec.profile,
        "profile_file": str(spec.profile_file) if spec.profile_file else None,
        "gpus": spec.gpus,
        "node_name": spec.node_name or os.environ.get("NODE_NAME") or DEFAULT_NODE_NAME,
        "overlay_file": str(spec.overlay_file) if spec.overlay_file else None,
        "override_file": str(spec.override_file) if spec.override_file else None,
        "surfaces": spec.surfaces,
        "surfaces_file": str(spec.surfaces_file) if spec.surfaces_file else None,
        "booted_ms": time.time_ns() // 1_000_000 if booted_ms is None else booted_ms,
    }
    atomic_write(path, json.dumps(data, indent=1))
    return path


def no_node(root: Path) -> MokkaError:
    """The error for a root without a node (a mistyped --root): raised before anything is written there."""
    return MokkaError(f"no simulated node under {root} ({NodeStore(root).node_file} is missing); start one with "
                      "`mokka node up` or `mokka run`, or point --root / $MOKKA_ROOT at one")


def load(root: Path) -> NodeSpec:
    path = NodeStore(root).node_file
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise no_node(root) from None
    except (OSError, ValueError) as exc:
        raise ConfigError(str(path), [("", f"unreadable node file: {exc}")]) from None
    if data.get("version") != FORMAT_VERSION:
        raise ConfigError(str(path), [("version", f"unsupported node file version, got {data.get('version')!r}")])
    spec = NodeSpec(
        profile=data.get("profile"),
        profile_file=Path(data["profile_file"]) if data.get("profile_file") else None,
        gpus=data.get("gpus"),
        node_name=data.get("node_name"),
        overlay_file=Path(data["overlay_file"]) if data.get("overlay_file") else None,
        override_file=Path(data["override_file"]) if data.get("override_file") else None,
        surfaces=data.get("surfaces") or {},
        surfaces_file=Path(data["surfaces_file"]) if data.get("surfaces_file") else None,
    )
    return rooted(spec, root)


def rooted(spec: NodeSpec, root: Path) -> NodeSpec:
    """The spec with the override and overlay defaulting to the files in the root's state dir."""
    store = NodeStore(root)
    return dataclasses.replace(
        spec,
        override_file=spec.override_file or store.override_file,
        overlay_file=spec.overlay_file or store.overlay_file,
    )
