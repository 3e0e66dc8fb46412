"""The override file: locked read-modify-write, validated against the node, replaced atomically, re-rendered.

One call of :func:`apply` is one transaction under the node lock: read the
current document (a corrupt one is refused with how to reset it), resolve the
node as it is, let the verb change a copy, resolve the node with the change (any
invalid value is refused and nothing is written), re-render the surfaces whose
plan changed with the very code the daemon uses (all-or-nothing: a surface that
cannot render the change refuses it), then write the file (temp file in the same
directory, mode 0644, ``rename``).  Two writers therefore serialise and
neither loses the other's update.
"""

from __future__ import annotations

import copy
import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .. import nodefile
from ..errors import ConfigError, MokkaError
from ..node.lock import node_lock
from ..node.render import RenderResult, installed_surfaces, render, resolve_with
from ..overlays import Override
from ..paths import OVERRIDE_FILE
from ..state import NodeState
from ..surface import Surface
from .complete import complete

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

Document = dict[str, Any]
Mutation = Callable[[Document, NodeState], str]


class Refused(MokkaError):
    """The change is not applied (exit status 1); the override file is unchanged."""


@dataclass
class Outcome:
    message: str
    node: NodeState
    render: RenderResult


def override_path(root: Path) -> Path:
    spec = nodefile.load(root)
    return spec.override_file or root / OVERRIDE_FILE


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
    from ..loader import validate

    if not doc:
        return None
    return validate(Override, doc, str(path), strict_keys=True)


def write_document(path: Path, doc: Document) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    text = yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False) if doc else ""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".overrides-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(tmp, 0o644)  # consumers may read as another user
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def apply(root: Path, mutate: Mutation, *, surfaces: Mapping[str, Surface] | None = None,
          start_empty: bool = False) -> Outcome:
    """Apply one verb as a locked transaction; raise :class:`Refused` and leave the file alone if invalid."""
    spec = nodefile.load(root)
    path = spec.override_file or root / OVERRIDE_FILE
    with node_lock(root):
        inputs = spec.inputs(with_override=False)
        doc: Document = {} if start_empty else read_document(path)
        try:
            current = resolve_with(inputs, validate_document(doc, path))
        except ConfigError as exc:
            raise Refused(corrupt_message(path, "\n  " + "\n  ".join(exc.lines()))) from None
        changed = copy.deepcopy(doc)
        message = mutate(changed, current)
        changed = normalise(changed)
        complete(changed, current)
        try:
            node = resolve_with(inputs, validate_document(changed, path))
        except ConfigError as exc:
            raise Refused("refused, override unchanged:\n  " + "\n  ".join(exc.lines())) from None
        chosen = surfaces if surfaces is not None else installed_surfaces(root=root)
        # render first: a surface that cannot render the change refuses it with the file untouched
        result = render(root, node, chosen)
        try:
            write_document(path, changed)
        except OSError:
            render(root, current, chosen)  # put the rendered state back in line with the file
            raise
    return Outcome(message=message, node=node, render=result)


def normalise(doc: Document) -> Document:
    """Drop empty buckets so the file stays readable; keep ``version`` when anything is left."""
    out = {key: value for key, value in doc.items() if key != "version" and value not in ({}, None)}
    if isinstance(out.get("devices"), dict):
        out["devices"] = {k: v for k, v in sorted(out["devices"].items(), key=lambda kv: int(kv[0])) if v}
        if not out["devices"]:
            del out["devices"]
    return {"version": 1, **out} if out else {}
