"""The node ``mokka run`` resolves for a spec, kept in Mokka's cache so the next run needs no pydantic.

An entry (``resolved/<digest of the spec>.json``) holds the resolved node, encoded as a node's snapshot
holds it (``model.codec``), with the fingerprint of every input it came from, taken before they were
read (``NodeSpec.fingerprints``).  It is used only while every input is unchanged and this version of
Mokka wrote it; anything else (missing, corrupt, stale) resolves the node from its files and replaces
the entry.  As with the snapshot, the entry is a cache: losing it costs only time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any, NamedTuple

from ..model.codec import decode, encode_shared
from ..model.inputs import Fingerprint
from ..model.node import Node
from ..model.spec import NodeSpec
from ..stage.paths import user_cache
from ..stage.store import atomic_write
from ..version import __version__

FORMAT_VERSION = 1
CACHE_DIR = "resolved"
#: entries kept (the newest): specs naming files in temporary directories would otherwise pile up
MAX_ENTRIES = 32


class Resolved(NamedTuple):
    base: Node  # before the override
    override_doc: dict[str, Any]  # canonical, as ``apply`` takes it
    fingerprints: dict[str, Fingerprint]  # of every input, taken before it was read
    base_json: Any  # ``base`` encoded (``encode_shared``), for the node's snapshot: no second encode


def resolve(spec: NodeSpec) -> Resolved:
    """The spec's node: from the cache while its inputs are unchanged, else from its files (and cached)."""
    path = user_cache(CACHE_DIR) / f"{key(spec)}.json"
    cached = _load(path, spec)
    if cached is not None:
        return cached
    from ..model.resolve import resolve_parts  # pydantic: only on a miss

    inputs = spec.inputs()
    base, doc = resolve_parts(inputs)
    fingerprints, encoded = dict(inputs.fingerprints or {}), encode_shared(base)
    save_record(path, FORMAT_VERSION, {"inputs": fingerprints, "override_doc": doc, "base": encoded}, MAX_ENTRIES)
    return Resolved(base, doc, fingerprints, encoded)


def key(spec: NodeSpec) -> str:
    """The spec's fields and what else the node is resolved from ($NODE_NAME names a node the spec leaves unnamed)."""
    fields = {name: str(value.absolute()) if isinstance(value, Path) else value  # a relative path: the cwd's file
              for name, value in dataclasses.asdict(spec).items()}
    node_name = os.environ.get("NODE_NAME")
    return hashlib.sha256(json.dumps([__version__, fields, node_name], sort_keys=True).encode()).hexdigest()[:32]


def save_record(path: Path, format_version: int, fields: dict[str, Any], keep: int) -> None:
    """Write a record of Mokka's cache, stamped with its format and this Mokka, keeping the newest ``keep``
    in its directory; a cache that cannot be written costs only the next run's time."""
    record = {"format": format_version, "mokka_core": __version__, **fields}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps(record, separators=(",", ":")))
        prune(path.parent, keep)
    except OSError:
        pass


def load_record(path: Path, format_version: int) -> dict[str, Any] | None:
    """A record :func:`save_record` wrote in this format with this Mokka; None for any other (or none).
    Raises OSError or ValueError where there is none or it is not JSON."""
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or data.get("format") != format_version or data.get("mokka_core") != __version__:
        return None
    return data


def prune(directory: Path, keep: int) -> None:
    """Remove all but the newest ``keep`` entries (one another run is reading is only its miss)."""
    by_age = []
    for entry in directory.glob("*.json"):
        with contextlib.suppress(OSError):
            by_age.append((entry.stat().st_mtime_ns, entry))
    for _, entry in sorted(by_age)[:-keep]:
        entry.unlink(missing_ok=True)


def _load(path: Path, spec: NodeSpec) -> Resolved | None:
    try:
        data = load_record(path, FORMAT_VERSION)
        if data is None:
            return None
        now = spec.fingerprints()
        if data["inputs"] != now or not isinstance(data["override_doc"], dict):
            return None
        return Resolved(decode(Node, data["base"]), data["override_doc"], now, data["base"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
