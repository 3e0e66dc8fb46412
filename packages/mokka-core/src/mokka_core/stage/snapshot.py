"""A node's snapshot: the resolved node as JSON, so ``nvml-mock-ctl`` can change it without pydantic.

Importing pydantic and building the profile models costs more than the ctl's whole budget
(a change visible within 250 ms of the command starting), so after every render from validated
inputs (``mokka node up`` and its re-renders, the ctl's full path, ``mokka run``) the node is
written down as plain data under the node lock:

* ``node``: the resolved :class:`~mokka_core.model.resolve.NodeState` (``model_dump(mode="json")``);
* ``base_configs``: each GPU's configuration before the override file, validated;
* ``override_doc``: the override document the node was resolved with;
* ``shapes``: the blocks of a GPU configuration (see :mod:`mokka_core.model.shapes`);
* ``inputs``: a fingerprint (inode, size, mtime) of every file the node was read from;
* ``rendered_with``: the surfaces the writer rendered the node with (a node daemon whose own
  surfaces are these need not render a change again).

:func:`load` returns the snapshot only while every input file is unchanged and the snapshot was
written by this version of Mokka; anything else (missing, corrupt, stale) gives None, and the
ctl takes the full path.  :meth:`Snapshot.node_with` lays a new override document over the base
configurations, as resolving would, and gives a :class:`~mokka_core.model.records.NodeRecord` that every
surface renders from.  Only GPU configurations may differ from the snapshot's node: the ctl uses
it for the verbs that change nothing else (see ``ctl/verbs.py``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..model.inputs import Fingerprint, fingerprint
from ..model.records import NodeRecord
from ..model.shapes import Shapes, lay_over
from ..schema.merge import merge_all
from ..version import __version__
from .store import NodeStore, atomic_write

if TYPE_CHECKING:
    from ..model.inputs import Inputs
    from ..model.resolve import NodeState

log = logging.getLogger(__name__)

FORMAT_VERSION = 1

@dataclass(frozen=True)
class Snapshot:
    root: Path
    data: dict[str, Any]  # the file's content, checked by load()

    @property
    def override_path(self) -> Path:
        return Path(self.data["override_path"])

    @property
    def override_doc(self) -> dict[str, Any]:
        return self.data["override_doc"]  # type: ignore[no-any-return]

    @property
    def shapes(self) -> Shapes:
        return self.data["shapes"]  # type: ignore[no-any-return]

    def node_with(self, doc: dict[str, Any]) -> NodeRecord:
        """The node with override document ``doc``; raises :class:`~mokka_core.model.shapes.NotFast`."""
        everyone = doc.get("all")
        devices = doc.get("devices") or {}
        gpus = []
        for gpu, base in zip(self.data["node"]["gpus"], self.data["base_configs"], strict=True):
            patch = merge_all(everyone, devices.get(str(gpu["index"])))
            gpus.append({**gpu, "config": lay_over(base, patch, self.shapes)})
        return NodeRecord({**self.data["node"], "gpus": gpus})

    def rendered_with(self, surfaces: Mapping[str, object]) -> bool:
        """Whether the node as recorded was rendered with exactly ``surfaces`` (so is staged as they would)."""
        return bool(self.data["rendered_with"] == surface_ids(surfaces))

    def advance(self, doc: dict[str, Any], node: NodeRecord, override_fingerprint: Fingerprint,
                surfaces: Mapping[str, object]) -> None:
        """Record that the override file (now ``override_fingerprint``) holds ``doc``, rendered as ``node``."""
        inputs = {**self.data["inputs"], str(self.override_path): override_fingerprint}
        _write(self.root, {**self.data, "inputs": inputs, "override_doc": doc, "node": node.plain(),
                           "rendered_with": surface_ids(surfaces)})


def load(root: Path) -> Snapshot | None:
    """The root's snapshot if it still describes the node; None otherwise (never raises for bad content)."""
    try:
        data = json.loads(NodeStore(root).snapshot.read_text(encoding="utf-8"))
        if data.get("format") != FORMAT_VERSION or data.get("mokka_core") != __version__:
            return None
        inputs = data["inputs"]
        if not isinstance(inputs, dict) or str(data["override_path"]) not in inputs:
            return None
        for path, recorded in inputs.items():
            if fingerprint(path) != recorded:
                return None
        node, bases = data["node"], data["base_configs"]
        if not (isinstance(data["override_doc"], dict) and isinstance(data["shapes"], dict)
                and isinstance(data["rendered_with"], list) and isinstance(node["surfaces"], dict)
                and isinstance(bases, list) and len(bases) == len(node["gpus"])
                and all(isinstance(gpu, dict) and isinstance(gpu["config"], dict) for gpu in node["gpus"])
                and all(isinstance(base, dict) for base in bases)):
            return None
        return Snapshot(root, data)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def save(root: Path, inputs: Inputs, node: NodeState, surfaces: Mapping[str, object]) -> None:
    """Write the snapshot of ``node``, resolved from ``inputs`` and rendered with ``surfaces`` (under the node lock).

    ``inputs.fingerprints`` were taken before the files were read (see ``NodeSpec.inputs``), so a
    file changed since makes the snapshot stale at once.  Inputs without fingerprints (built in
    memory, or read without the override file) remove the snapshot instead.
    """
    from ..model.resolve import base_configs
    from ..model.shapes import device_shapes

    store = NodeStore(root)
    path = store.snapshot
    known = inputs.fingerprints or {}
    if str(inputs.override_source) not in known or not path.parent.is_dir():
        path.unlink(missing_ok=True)
        return
    # the node file is written by the same command from the same spec, just before this
    fingerprints = {**known, str(store.node_file): fingerprint(store.node_file)}
    data = {
        "format": FORMAT_VERSION,
        "mokka_core": __version__,
        "inputs": fingerprints,
        "override_path": str(inputs.override_source),
        "override_doc": inputs.override_doc or {},
        "node": node.model_dump(mode="json"),
        "base_configs": base_configs(inputs),
        "shapes": device_shapes(),
        "rendered_with": surface_ids(surfaces),
    }
    _write(root, data)


def surface_ids(surfaces: Mapping[str, object]) -> list[str]:
    """``name=module:class`` of each surface (instances or classes), sorted."""
    ids = []
    for name, surface in surfaces.items():
        cls = surface if isinstance(surface, type) else type(surface)
        ids.append(f"{name}={cls.__module__}:{cls.__qualname__}")
    return sorted(ids)


def _write(root: Path, data: dict[str, Any]) -> None:
    """Replace the snapshot; one that cannot be written is only a cache miss (the old one is stale by then)."""
    try:
        atomic_write(NodeStore(root).snapshot, json.dumps(data, separators=(",", ":")))  # dumps: the C encoder
    except OSError as exc:
        log.warning("node snapshot not written (%s): the next nvml-mock-ctl change takes the full path", exc)
