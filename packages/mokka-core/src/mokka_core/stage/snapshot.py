"""A node's snapshot: the resolved node as rendered, with a fingerprint of every input it came from.

Every render writes it under the node lock (``mokka node up`` and its re-renders, ``nvml-mock-ctl``,
``mokka run``):

* ``base``: the resolved node before the override file (``model.codec.encode_shared``);
* ``override_path`` / ``override_doc``: the override file and the canonical document applied;
* ``inputs``: the fingerprint (inode, size, mtime) of every file the node was read from, taken
  before it was read, the override file's as written;
* ``rendered_with``: the surfaces it was rendered with (a daemon whose own surfaces these are need
  not render a change again);
* ``digests``: a digest of each staged surface's plan (``render`` restages a surface whose plan's
  digest changed): they describe what is staged, so they are read whether or not the rest is fresh.

:func:`load` returns the snapshot only while every input file is unchanged and this version of
Mokka wrote it; the node is then ``apply(base, override_doc)`` without reading or validating a
document again, which keeps ``nvml-mock-ctl`` free of pydantic.  Anything else (missing, corrupt,
stale) gives None, and the caller resolves the node from its files: the snapshot is a cache.

A process that renders again and again (the node daemon taking ctl commands, ``Node.ctl``) keeps
the last snapshot it wrote or read per root in memory, under the file's fingerprint, so it does not
parse and decode what it wrote itself; any other writer's snapshot has another fingerprint.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from ..model.apply import apply
from ..model.codec import decode, encode_shared
from ..model.inputs import Fingerprint, fingerprint
from ..model.node import Node
from ..version import __version__
from .store import NodeStore, atomic_write

FORMAT_VERSION = 3
#: snapshot file -> (its fingerprint, its record, the snapshot decoded from it or None): the last few roots
_MEMO: dict[str, tuple[Fingerprint, dict[str, Any], Snapshot | None]] = {}
_MEMO_ROOTS = 8


class Snapshot(NamedTuple):
    base: Node  # resolved without the override
    override_path: Path
    override_doc: dict[str, Any]  # canonical: what ``apply`` laid over ``base``
    inputs: dict[str, Fingerprint]
    rendered_with: list[str]
    digests: dict[str, str]  # of each staged surface's plan
    base_json: Any  # ``base`` as the file holds it (recorded again as it is: no second encode)

    def node(self) -> Node:
        return apply(self.base, self.override_doc)

    def was_rendered_with(self, surfaces: Mapping[str, object]) -> bool:
        """Whether the node as recorded was rendered with exactly ``surfaces`` (so is staged as they would)."""
        return self.rendered_with == surface_ids(surfaces)


def load(root: Path) -> Snapshot | None:
    """The root's snapshot if it still describes the node; None otherwise (never raises for bad content)."""
    data = record(root)
    return None if data is None else from_record(data)


def record(root: Path) -> dict[str, Any] | None:
    """The snapshot file's content while it still describes the node, its node not yet decoded; else None.

    Cheap (no node is built): what a node daemon checks under the node lock after every change.
    """
    try:
        path = NodeStore(root).snapshot
        known = _MEMO.get(str(path))
        seen = fingerprint(path)
        if known is not None and known[0] == seen:
            data = known[1]
        else:
            data = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(data, dict) and seen is not None:
                _remember(path, seen, data, None)
        if data.get("format") != FORMAT_VERSION or data.get("mokka_core") != __version__:
            return None
        inputs = data["inputs"]
        if not isinstance(inputs, dict) or str(data["override_path"]) not in inputs:
            return None
        for input_path, recorded in inputs.items():
            if fingerprint(input_path) != recorded:
                return None
        if not (isinstance(data["override_doc"], dict) and isinstance(data["rendered_with"], list)):
            return None
        return data
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def from_record(data: Mapping[str, Any]) -> Snapshot | None:
    """The snapshot a fresh record holds; None where its node is not a node (never raises for bad content)."""
    memo = next(((path, entry) for path, entry in _MEMO.items() if entry[1] is data), None)
    if memo is not None and memo[1][2] is not None:
        decoded = memo[1][2]
        return decoded._replace(override_doc=copy.deepcopy(decoded.override_doc))
    try:
        decoded = Snapshot(
            base=decode(Node, data["base"]), override_path=Path(str(data["override_path"])),
            override_doc=data["override_doc"], inputs=data["inputs"], rendered_with=data["rendered_with"],
            digests={str(k): str(v) for k, v in data.get("digests", {}).items()}, base_json=data["base"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if memo is not None:
        _MEMO[memo[0]] = (memo[1][0], memo[1][1], decoded)
        return decoded._replace(override_doc=copy.deepcopy(decoded.override_doc))
    return decoded


def save(root: Path, base: Node, override_path: Path, override_doc: Mapping[str, Any],
         inputs: Mapping[str, Fingerprint] | None, surfaces: Mapping[str, object],
         digests: Mapping[str, str], base_json: Any = None) -> None:
    """Record that ``apply(base, override_doc)`` was rendered with ``surfaces`` (caller holds the node lock).

    ``inputs`` were taken before the files were read (``NodeSpec.inputs``), the override file's when
    it was written, so a file changed since makes the snapshot stale at once.  Without them (a node
    built in memory) only the digests are recorded.  ``base_json``: ``base`` already encoded (as read).
    """
    store = NodeStore(root)
    path = store.snapshot
    known = dict(inputs or {})
    if not path.parent.is_dir():
        return
    if str(override_path) not in known:  # a node built in memory: what is staged, but no node to start from
        _write(root, {"format": FORMAT_VERSION, "mokka_core": __version__, "digests": dict(sorted(digests.items()))})
        return
    # the node file is written by the same command from the same spec, just before this
    known[str(store.node_file)] = fingerprint(store.node_file)
    doc, rendered, recorded = copy.deepcopy(dict(override_doc)), surface_ids(surfaces), dict(sorted(digests.items()))
    encoded = encode_shared(base) if base_json is None else base_json
    data = {"format": FORMAT_VERSION, "mokka_core": __version__, "inputs": known, "override_path": str(override_path),
            "override_doc": doc, "base": encoded, "rendered_with": rendered, "digests": recorded}
    written = _write(root, data)
    if written is not None:
        _remember(path, written, data, Snapshot(base=base, override_path=Path(str(override_path)), override_doc=doc,
                                                inputs=known, rendered_with=rendered, digests=recorded,
                                                base_json=encoded))


def _remember(path: Path, written: Fingerprint, data: dict[str, Any], decoded: Snapshot | None) -> None:
    _MEMO.pop(str(path), None)
    while len(_MEMO) >= _MEMO_ROOTS:
        _MEMO.pop(next(iter(_MEMO)))
    _MEMO[str(path)] = (written, data, decoded)


def digests(root: Path) -> dict[str, str]:
    """The digest of each staged surface's plan as last rendered, fresh or not ({} where unknown: a restage)."""
    try:
        data = json.loads(NodeStore(root).snapshot.read_text(encoding="utf-8"))
        recorded = data["digests"] if data.get("format") == FORMAT_VERSION else {}
        return {str(k): str(v) for k, v in recorded.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def surface_ids(surfaces: Mapping[str, object]) -> list[str]:
    """``name=module:class`` of each surface (instances or classes), sorted."""
    ids = []
    for name, surface in surfaces.items():
        cls = surface if isinstance(surface, type) else type(surface)
        ids.append(f"{name}={cls.__module__}:{cls.__qualname__}")
    return sorted(ids)


_BASE_TEXT: list[tuple[Any, str]] = []  # the last base encoded, with its text: it is the same at every ctl change


def _encoded(data: dict[str, Any]) -> str:
    """``data`` as compact JSON (the C encoder); the base node's text is reused while its document is
    the same object (it is decoded once per snapshot and passed along), so a change encodes only the rest."""
    base = data.get("base")
    if base is None:
        return json.dumps(data, separators=(",", ":"))
    if not _BASE_TEXT or _BASE_TEXT[0][0] is not base:
        _BASE_TEXT[:] = [(base, json.dumps(base, separators=(",", ":")))]
    rest = json.dumps({key: value for key, value in data.items() if key != "base"}, separators=(",", ":"))
    return f'{rest[:-1]},"base":{_BASE_TEXT[0][1]}}}'


def _write(root: Path, data: dict[str, Any]) -> Fingerprint:
    """Replace the snapshot; one that cannot be written is only a cache miss (the old one is stale by then)."""
    path = NodeStore(root).snapshot
    _MEMO.pop(str(path), None)
    try:
        return atomic_write(path, _encoded(data))
    except OSError as exc:
        import logging

        logging.getLogger(__name__).warning("node snapshot not written (%s): the next nvml-mock-ctl change "
                                            "resolves the node", exc)
        return None
