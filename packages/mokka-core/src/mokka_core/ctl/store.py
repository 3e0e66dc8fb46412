"""The override file: locked read-modify-write, validated against the node, replaced atomically, re-rendered.

One call of :func:`apply` is one transaction under the node lock: read the
current document (a corrupt one is refused with how to reset it), resolve the
node as it is, let the verb change a copy, resolve the node with the change (any
invalid value is refused and nothing is written), re-render the surfaces whose
plan changed with the very code the daemon uses (all-or-nothing: a surface that
cannot render the change refuses it), then write the file (temp file in the same
directory, mode 0644, ``rename``).  Two writers therefore serialise and
neither loses the other's update.

Two ways to the changed node, one outcome:

* the full path reads and validates every input with pydantic and resolves the node;
* the fast path, for verbs whose values are range-checked by the verb itself
  (:data:`~.verbs.FAST_VERBS`), starts from the node's snapshot (see
  :mod:`mokka_core.stage.snapshot`) and lays the changed document over it, without
  importing pydantic: it is what keeps a change within 250 ms of the command
  starting.  Where the snapshot is missing or stale, or the change needs the full
  validation (a block the override creates lacks required fields, the surfaces
  change), the full path runs instead.  ``tests/test_ctl_fast.py`` checks that both
  paths render every surface the same for every verb and profile.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from ..errors import ConfigError, MokkaError
from ..model.inputs import Fingerprint
from ..model.records import NodeRecord
from ..model.shapes import NotFast
from ..stage import snapshot
from ..stage.render import RenderResult, installed_surfaces, render
from ..stage.staging import StagingError
from ..stage.store import NodeStore, atomic_write
from .complete import complete

if TYPE_CHECKING:
    from ..model.resolve import NodeState
    from ..schema.overlays import Override
    from ..stage.surface import Surface

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

Document = dict[str, Any]
Mutation = Callable[[Document, "NodeState | NodeRecord"], str]


class Refused(MokkaError):
    """The change is not applied (exit status 1); the override file is unchanged."""


@dataclass
class Outcome:
    message: str
    node: NodeState | NodeRecord
    render: RenderResult
    fast: bool = False  # taken without pydantic, from the node's snapshot


def override_path(root: Path) -> Path:
    from ..stage import nodefile

    spec = nodefile.load(root)
    return spec.override_file or NodeStore(root).override_file


def read_document(path: Path) -> Document:
    """The override document as plain data; a missing or blank file is an empty document."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise Refused(corrupt_message(path, f"unreadable ({exc})")) from None
    if not text.strip():
        return {}
    try:
        data = yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        raise Refused(corrupt_message(path, f"not valid YAML ({str(exc).splitlines()[0]})")) from None
    if not isinstance(data, dict):
        raise Refused(corrupt_message(path, f"top level must be a mapping, got {type(data).__name__}"))
    return data


def corrupt_message(path: Path, why: str) -> str:
    return (f"override file {path} is corrupt: {why}. Nothing was changed. Reset it with "
            f"`nvml-mock-ctl reset` (clears every override) or fix it by hand.")


def validate_document(doc: Document, path: Path) -> Override | None:
    from ..schema.loader import validate
    from ..schema.overlays import Override

    if not doc:
        return None
    return validate(Override, doc, str(path), strict_keys=True)


def write_document(path: Path, doc: Document) -> Fingerprint:
    """Replace the file with ``doc``; returns the new file's fingerprint (taken before it is visible)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    text = yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False) if doc else ""
    return atomic_write(path, text)


def apply(root: Path, mutate: Mutation, *, surfaces: Mapping[str, Surface] | None = None,
          start_empty: bool = False, fast: bool = False) -> Outcome:
    """Apply one verb as a locked transaction; raise :class:`Refused` and leave the file alone if invalid.

    ``fast``: the verb checks its own values, so the node's snapshot may stand in for the full resolve.
    """
    with NodeStore(root).lock():
        chosen = surfaces if surfaces is not None else installed_surfaces(root=root)
        change = None
        if fast and not start_empty:
            try:
                change = prepare_fast(root, mutate)
            except (LookupError, TypeError, ValueError, AttributeError):
                change = None  # a snapshot edited into nonsense: the full path reads the real inputs
        if change is None:
            change = prepare_full(root, mutate, start_empty=start_empty)
        # render first: a surface that cannot render the change refuses it with the file untouched
        try:
            result = render(root, change.node, chosen)
        except StagingError:
            if not change.fast:
                raise
            # a surface (a third-party plugin, say) that needs the models: the full path decides
            change = prepare_full(root, mutate)
            result = render(root, change.node, chosen)
        try:
            written = write_document(change.path, change.doc)
        except OSError:
            render(root, change.current, chosen)  # put the rendered state back in line with the file
            raise
        change.record(written, chosen)
    return Outcome(message=change.message, node=change.node, render=result, fast=change.fast)


@dataclass
class Change:
    """A verb's change, made but not yet published."""

    message: str
    doc: Document  # the new override document
    path: Path  # the override file
    node: NodeState | NodeRecord  # the node with the change
    current: NodeState | NodeRecord  # the node without it
    #: update the snapshot once the file is written and the node rendered with these surfaces
    record: Callable[[Fingerprint, Mapping[str, Surface]], None]
    fast: bool


def prepare_full(root: Path, mutate: Mutation, *, start_empty: bool = False) -> Change:
    """The change, validated by resolving the whole node with pydantic (caller holds the node lock)."""
    from ..model.shapes import device_shapes
    from ..stage import nodefile
    from ..stage.render import resolve_with

    spec = nodefile.load(root)
    path = spec.override_file or NodeStore(root).override_file
    inputs = spec.inputs(with_override=False)
    doc: Document = {} if start_empty else read_document(path)
    try:
        current = resolve_with(inputs, validate_document(doc, path))
    except ConfigError as exc:
        raise Refused(corrupt_message(path, "\n  " + "\n  ".join(exc.lines()))) from None
    changed = copy.deepcopy(doc)
    message = mutate(changed, current)
    changed = normalise(changed)
    complete(changed, current, device_shapes())
    try:
        node = resolve_with(inputs, validate_document(changed, path))
    except ConfigError as exc:
        raise Refused("refused, override unchanged:\n  " + "\n  ".join(exc.lines())) from None

    def record(written: Fingerprint, rendered_with: Mapping[str, Surface]) -> None:
        fingerprints = {**(inputs.fingerprints or {}), str(path): written}
        snapshot.save(root, replace(inputs, override_doc=changed, override_source=str(path),
                                    fingerprints=fingerprints), node, rendered_with)

    return Change(message, changed, path, node, current, record, fast=False)


def prepare_fast(root: Path, mutate: Mutation) -> Change | None:
    """The change from the node's snapshot, without pydantic; None where only the full path can make it."""
    snap = snapshot.load(root)
    if snap is None:
        return None
    doc = snap.override_doc
    current = NodeRecord(snap.data["node"])  # resolved from ``doc``
    changed = copy.deepcopy(doc)
    message = mutate(changed, current)
    changed = normalise(changed)
    if changed.get("surfaces") != doc.get("surfaces"):
        return None
    complete(changed, current, snap.shapes)
    try:
        node = snap.node_with(changed)
    except NotFast:
        return None
    return Change(message, changed, snap.override_path, node, current,
                  lambda written, rendered_with: snap.advance(changed, node, written, rendered_with), fast=True)


def normalise(doc: Document) -> Document:
    """Drop empty buckets so the file stays readable; keep ``version`` when anything is left."""
    out = {key: value for key, value in doc.items() if key != "version" and value not in ({}, None)}
    if isinstance(out.get("devices"), dict):
        out["devices"] = {k: v for k, v in sorted(out["devices"].items(), key=lambda kv: int(kv[0])) if v}
        if not out["devices"]:
            del out["devices"]
    return {"version": 1, **out} if out else {}
