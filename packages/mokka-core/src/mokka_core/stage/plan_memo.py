"""What the last render of a root built, so that the next change builds again only what reads it.

A change (an ``nvml-mock-ctl`` verb) starts from the node staged now, ``render``'s ``since``, and
touches a few GPU configuration fields (``render.touched_fields``).  A plan part
(``Surface.parts``) or a contribution to the gpu surface (``Surface.nvml``, ``Surface.char_majors``)
that reads none of them is what it was for ``since``: it is taken from the render that built it, if
that render built it for that very node object (nodes are immutable: no walk compares them) under an
equal context.  Like a surface that ``render`` keeps, a part reads the host (the built library, the
nvidia-smi cache, ``/proc/devices``) as the render that built it found it; a render without
``since`` (the daemon at start-up, ``force``) builds everything.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from ..model.node import Node
    from .surface import Entry, NvmlKeys, PlanPart, StageContext, Surface

    Contribution = tuple[NvmlKeys, tuple[tuple[int, str], ...]]


class Built(NamedTuple):
    """What one render built for ``node``: each value with what built it and the context it was built in."""

    node: Node
    contributions: dict[str, tuple[type[Surface], StageContext, Contribution]]  # by surface
    parts: dict[tuple[str, str], tuple[PlanPart, StageContext, list[Entry]]]  # by (surface, part)
    digests: dict[tuple[str, str], list[str]]  # each part's ``staging.entry_digest`` list, by (surface, part)


_LAST: dict[str, Built] = {}  # by root; a root's entry is replaced by each render and dropped at teardown
_ROOTS = 4
_LOCK = threading.Lock()


class Reuse:
    """One render's use of the last one: what it may take (``last``, for the node the change starts
    from, and the fields the change touches) and what it built, for the next render."""

    def __init__(self, root: Path, since: Node | None, touched: frozenset[str] | None) -> None:
        self.root = str(root)
        last = _LAST.get(self.root)
        self.last = last if last is not None and since is not None and last.node is since else None
        self.touched = touched
        self.contributions: dict[str, tuple[type[Surface], StageContext, Contribution]] = {}
        self.parts: dict[tuple[str, str], tuple[PlanPart, StageContext, list[Entry]]] = {}
        self.spans: dict[str, list[tuple[tuple[str, str], int, int, bool]]] = {}  # (part, start, end, taken)
        self.digests: dict[tuple[str, str], list[str]] = {}

    def _untouched(self, reads: frozenset[str] | None) -> bool:
        return self.touched is not None and reads is not None and not reads & self.touched

    def contribution(self, name: str, surface: Surface, ctx: StageContext,
                     build: Callable[[], Contribution]) -> Contribution:
        found = self.last.contributions.get(name) if self.last is not None else None
        if (found is not None and found[0] is type(surface) and self._untouched(surface.reads)
                and _same(found[1], ctx)):
            value = found[2]
        else:
            value = build()
        self.contributions[name] = (type(surface), ctx, value)
        return value

    def plan(self, name: str, surface: Surface, node: Node, ctx: StageContext) -> list[Entry]:
        """``surface``'s plan for ``node``: each part as the last render built it where it may be."""
        parts = surface.parts()
        if len(parts) == 1:  # the whole plan: it could be taken only where render keeps the surface anyway
            return list(parts[0].build(node, ctx))
        entries: list[Entry] = []
        spans = self.spans[name] = []
        for part in parts:
            built, was_taken = self._part(name, part, node, ctx)
            start = len(entries)
            entries += built
            spans.append(((name, part.name), start, len(entries), was_taken))
        return entries

    def taken(self, name: str) -> set[int]:
        """The indices of ``name``'s plan that parts taken from the last render hold: published by it as they
        are (``staging.stage_wave``'s ``trusted``)."""
        return {n for _, start, end, taken in self.spans.get(name, ()) if taken for n in range(start, end)}

    def entry_digests(self, name: str, plan: list[Entry], digest: Callable[[Entry], str]) -> list[str]:
        """``digest`` of each entry of ``name``'s plan as :meth:`plan` built it: a part taken from the last
        render keeps the digests that render made of it (a copy's source is read as it found it)."""
        spans = self.spans.get(name)
        if spans is None:
            return [digest(entry) for entry in plan]
        out: list[str] = []
        for key, start, end, taken in spans:
            kept = self.last.digests.get(key) if taken and self.last is not None else None
            made = kept if kept is not None else [digest(entry) for entry in plan[start:end]]
            self.digests[key] = made
            out += made
        return out

    def _part(self, name: str, part: PlanPart, node: Node, ctx: StageContext) -> tuple[list[Entry], bool]:
        key = (name, part.name)
        found = self.last.parts.get(key) if self.last is not None else None
        taken = found is not None and found[0] == part and self._untouched(part.reads) and _same(found[1], ctx)
        built = found[2] if taken and found is not None else list(part.build(node, ctx))
        self.parts[key] = (part, ctx, built)
        return built, taken

    def remember(self, node: Node) -> None:
        """Record what this render built, for ``node``: the next change starts from it.  A surface it did
        not build (one ``render`` keeps) is built whole when a change reads it, so it needs no record."""
        with _LOCK:
            _LAST.pop(self.root, None)
            while len(_LAST) >= _ROOTS:
                _LAST.pop(next(iter(_LAST)))
            _LAST[self.root] = Built(node, self.contributions, self.parts, self.digests)


def forget(root: Path) -> None:
    """Drop what the renders of ``root`` built (its node is torn down)."""
    with _LOCK:
        _LAST.pop(str(root), None)


def _same(then: StageContext, now: StageContext) -> bool:
    return then is now or then == now
