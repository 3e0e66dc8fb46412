"""The override file: locked read-modify-write, the change applied to the node, re-rendered, replaced atomically.

One call of :func:`apply` is one transaction under the node lock: take the node as it
is (its snapshot, or resolved from its files where the snapshot is stale), let the verb
change a copy of the override document, lay the new document over the node with
``model.apply`` (the daemon and ``mokka run`` do the same), re-render the surfaces
whose plan changed (all-or-nothing: a surface that cannot render the change refuses
it), then write the file (temp file in the same directory, mode 0644, ``rename``) and
record the snapshot.  Two writers therefore serialise and neither loses the other's
update.  A verb that writes values it does not check itself (``set``) has the whole
new document validated first.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from ..errors import ConfigError, MokkaError
from ..model import apply as model_apply
from ..model.inputs import Fingerprint
from ..stage import mig_partition, snapshot
from ..stage.render import RenderResult, installed_surfaces, render
from ..stage.store import NodeStore, atomic_write, write_temps

if TYPE_CHECKING:
    from ..model.node import Node
    from ..stage.surface import Surface


Document = dict[str, Any]
Mutation = Callable[[Document, "Node"], str]


class Refused(MokkaError):
    """The change is not applied (exit status 1); the override file is unchanged."""


class Outcome(NamedTuple):
    message: str
    node: Node
    render: RenderResult
    from_snapshot: bool  # the node was taken from its snapshot (no document read, no pydantic)


class Current(NamedTuple):
    """The node as it is: resolved without the override, the canonical override, and where they came from."""

    base: Node
    doc: Document
    path: Path  # the override file
    inputs: dict[str, Fingerprint]  # of every input but the override file
    from_snapshot: bool
    rendered: list[str] | None = None  # the surfaces the snapshot's node is staged with, where it is known
    digests: dict[str, str] | None = None  # of the staged plans, where the snapshot was read
    base_json: Any = None  # ``base`` as the snapshot holds it, where it was read

    def node(self) -> Node:
        return model_apply.apply(self.base, self.doc)

    def rendered_with(self, surfaces: Mapping[str, Surface]) -> bool:
        """Whether what is staged now is this node rendered with ``surfaces``."""
        return self.rendered is not None and self.rendered == snapshot.surface_ids(surfaces)


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
    from ..schema.yamldoc import parse_yaml  # only where a document is read: on the ctl's way

    try:
        data = parse_yaml(text, str(path))
    except ConfigError as exc:
        raise Refused(corrupt_message(path, "; ".join(message for _, message in exc.problems))) from None
    if not isinstance(data, dict):
        raise Refused(corrupt_message(path, f"top level must be a mapping, got {type(data).__name__}"))
    return data


def corrupt_message(path: Path, why: str) -> str:
    return (f"override file {path} is corrupt: {why}. Nothing was changed. Reset it with "
            f"`nvml-mock-ctl reset` (clears every override) or fix it by hand.")


def checked(base: Node, doc: Document, path: Path, profile_source: str) -> Document:
    """``doc`` validated (keys strictly, values against ``base``) and canonical; raises ConfigError."""
    from ..model.resolve import canonical_override
    from ..schema.loader import validate
    from ..schema.overlays import Override

    if not doc:
        return {}
    document = validate(Override, doc, str(path), strict_keys=True).model_dump(exclude_unset=True)
    return canonical_override(base, document, str(path), profile_source)


def write_document(path: Path, doc: Document) -> Fingerprint:
    """Replace the file with ``doc``; returns the new file's fingerprint (taken before it is visible)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    import yaml

    text = yaml.dump(doc, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False,
                     default_flow_style=False) if doc else ""
    return atomic_write(path, text)


def current(root: Path, *, start_empty: bool = False) -> Current:
    """The node as it is now (caller holds the node lock): from its snapshot, else from its files.

    ``start_empty``: the override file is about to be cleared, so it is not read (a corrupt one
    must not stand in the way of ``reset``).
    """
    snap = snapshot.load(root)
    if snap is not None:
        inputs = {path: print_ for path, print_ in snap.inputs.items() if path != str(snap.override_path)}
        return Current(snap.base, snap.override_doc, snap.override_path, inputs, from_snapshot=True,
                       rendered=snap.rendered_with, digests=snap.digests, base_json=snap.base_json)
    from ..model.resolve import resolve_base
    from ..stage import nodefile

    spec = nodefile.load(root)
    path = spec.override_file or NodeStore(root).override_file
    read = spec.inputs(with_override=False)
    doc = {} if start_empty else read_document(path)
    base = resolve_base(read)
    try:
        canonical = checked(base, doc, path, read.profile_source)
    except ConfigError as exc:
        raise Refused(corrupt_message(path, "\n  " + "\n  ".join(exc.lines()))) from None
    return Current(base, canonical, path, dict(read.fingerprints or {}), from_snapshot=False)


def apply(root: Path, mutate: Mutation | Sequence[Mutation], *, surfaces: Mapping[str, Surface] | None = None,
          start_empty: bool = False, validate: bool = False) -> Outcome:
    """Apply one verb, or several in order, as one locked transaction with one render; raise
    :class:`Refused` and leave the file alone if any is invalid.

    Each verb sees the node as the verbs before it left it; the message has one line per verb.
    ``validate``: a verb writes values it does not check itself, so the new document is validated.
    """
    mutations = [mutate] if callable(mutate) else list(mutate)
    with NodeStore(root).lock():
        chosen = surfaces if surfaces is not None else installed_surfaces(root=root)
        now = current(root, start_empty=start_empty)
        doc: Document = {} if start_empty else now.doc
        before = _APPLIED.apply(now.base, doc)
        changed = copy.deepcopy(doc)
        messages = []
        for step, change in enumerate(mutations):
            seen = before if step == 0 else _applied(now.base, normalise(changed))
            messages.append(change(changed, seen))
        message = "\n".join(messages)
        changed = normalise(changed)
        try:
            if validate:
                changed = normalise(checked(now.base, changed, now.path, now.base.profile_name))
            node = _APPLIED.apply(now.base, changed)
            rebased = _rebased_fault_clocks(root, now.base, before, node)
            if rebased:
                changed = rebased_document(changed, rebased)
                node = _APPLIED.apply(now.base, changed)
        except (ConfigError, model_apply.ApplyError) as exc:
            lines = exc.lines() if isinstance(exc, ConfigError) else [str(exc)]
            raise Refused("refused, override unchanged:\n  " + "\n  ".join(lines)) from None
        if validate:  # a profile table the GPUs' current MIG partition breaks (the library would drop the partition)
            tables = {gpu.index: gpu.config.mig.gpu_instance_profiles if gpu.config.mig and
                      gpu.config.mig.max_gpu_instances else () for gpu in node.gpus}
            broken = mig_partition.broken_by(mig_partition.partitions(root), tables)
            if broken:
                raise Refused("refused, override unchanged: the MIG partition does not fit the profile table "
                              "(destroy the instances first):\n  " + "\n  ".join(broken))
        # render first: a surface that cannot render the change refuses it with the file untouched
        result = render(root, node, chosen, since=before if now.rendered_with(chosen) else None, recorded=now.digests)
        _remove_killed_writes(now.path)
        _remove_killed_writes(NodeStore(root).snapshot)
        try:
            written = write_document(now.path, changed)
        except OSError:
            render(root, now.node(), chosen)  # put the rendered state back in line with the file
            raise
        snapshot.save(root, now.base, now.path, changed, {**now.inputs, str(now.path): written}, chosen,
                      result.digests, base_json=now.base_json)
    return Outcome(message=message, node=node, render=result, from_snapshot=now.from_snapshot)


def _remove_killed_writes(path: Path) -> None:
    """The temp files of ``path``'s writers killed before their rename (a SIGKILLed in-process ctl): only the
    node lock's holder writes it (the override, the snapshot), so none is in flight."""
    for temp in write_temps(path.parent):
        if temp.name.startswith(f".{path.name}."):
            temp.unlink(missing_ok=True)


class _LastApplied:
    """``model.apply`` of the last document over the last base: the node a change starts from is the
    one the change before it made (nodes are immutable values, so sharing one is safe)."""

    def __init__(self) -> None:
        self.last: tuple[Node, Document, Node] | None = None

    def apply(self, base: Node, doc: Document) -> Node:
        last = self.last
        if last is not None and last[0] is base and last[1] == doc:
            return last[2]
        node = model_apply.apply(base, doc)
        self.last = (base, copy.deepcopy(doc), node)
        return node


_APPLIED = _LastApplied()


def _applied(base: Node, doc: Document) -> Node:
    """The node a later verb of a batch sees: the earlier verbs' document laid over ``base``."""
    try:
        return model_apply.apply(base, doc)
    except (ConfigError, model_apply.ApplyError) as exc:
        lines = exc.lines() if isinstance(exc, ConfigError) else [str(exc)]
        raise Refused("refused, override unchanged:\n  " + "\n  ".join(lines)) from None


def _rebased_fault_clocks(root: Path, base: Node, before: Node, after: Node) -> dict[int, dict[str, Any]]:
    def counting(node: Node) -> bool:
        return any(e.rate or e.accrued for e in (gpu.config.nvlink_error for gpu in node.gpus) if e is not None)

    if not (counting(before) or counting(after)):
        return {}
    from ..model.faults import rebased_nvlink_errors

    return rebased_nvlink_errors(before, after, time.time_ns() // 1_000_000, NodeStore(root).booted_ms(), base)


def rebased_document(doc: Document, rebased: Mapping[int, Mapping[str, Any]]) -> Document:
    """``doc`` with the per-GPU dotted ``rebased`` values written into each GPU's bucket."""
    devices = doc.setdefault("devices", {})
    for index, values in rebased.items():
        for dotted, value in values.items():
            *parents, leaf = dotted.split(".")
            bucket = devices.setdefault(str(index), {})
            for part in parents:
                bucket = bucket.setdefault(part, {})
            bucket[leaf] = value
    return doc


def normalise(doc: Document) -> Document:
    """Drop empty buckets so the file stays readable; keep ``version`` when anything is left."""
    out = {key: value for key, value in doc.items() if key != "version" and value not in ({}, None)}
    if isinstance(out.get("devices"), dict):
        out["devices"] = {k: v for k, v in sorted(out["devices"].items(), key=lambda kv: int(kv[0])) if v}
        if not out["devices"]:
            del out["devices"]
    return {"version": 1, **out} if out else {}
