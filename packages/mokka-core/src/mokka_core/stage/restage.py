"""Re-render a node whose NVML setter record changed (a MIG partition made or destroyed).

The record is not an input of the node model: what follows a partition (capability files and
device nodes, CDI devices) reads it through :attr:`StageContext.mig`.  So after the C library (or
``nvml-mock-ctl mig``) changed it, every plan is built again from the node as recorded and the
surfaces whose plan changed are republished, all-or-nothing.  Callers hold the node lock.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from . import snapshot
from .render import RenderResult, render

if TYPE_CHECKING:
    from .surface import Surface


def restage(root: Path, surfaces: Mapping[str, Surface], stop: threading.Event | None = None) -> RenderResult | None:
    """Bring the staged surfaces in line with the record; None when the node's snapshot is stale or was
    rendered with other surfaces (whoever changed the inputs renders everything, the record included)."""
    snap = snapshot.load(root)
    if snap is None or not snap.was_rendered_with(surfaces):
        return None
    result = render(root, snap.node(), surfaces, stop=stop, recorded=snap.digests)
    if result.staged or result.removed:
        snapshot.save(root, snap.base, snap.override_path, snap.override_doc, snap.inputs, surfaces,
                      result.digests, base_json=snap.base_json)
    return result
