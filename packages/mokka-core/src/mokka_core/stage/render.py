"""Render a node under a root: every plan built in parallel, then exactly the changed surfaces restaged.

Used by the daemon at start-up and on every watched change, and by ``nvml-mock-ctl``
after it wrote the override file, so both converge the same way.  A digest of each
surface's last published plan is kept in the state directory; a surface is
restaged when its new plan's digest differs (or it is not staged), torn down when
the node no longer enables it, and left alone otherwise.  Callers hold
:meth:`mokka_core.stage.store.NodeStore.lock`.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import MokkaError
from . import mig_boot, mig_partition, plan_memo, snapshot, staging
from .native import native_dir
from .store import NodeStore, atomic_write
from .surface import (
    ConsumerNeeds,
    Entry,
    Service,
    StageContext,
    Surface,
    discover,
)

if TYPE_CHECKING:
    from ..model.node import Node



class RenderResult:
    """What one render did: the surfaces (re)published, torn down (no longer enabled), left alone."""

    __slots__ = ("digests", "removed", "staged", "unchanged")

    def __init__(self, staged: list[str] | None = None, removed: list[str] | None = None,
                 unchanged: list[str] | None = None) -> None:
        self.staged = staged or []
        self.removed = removed or []
        self.unchanged = unchanged or []
        self.digests: dict[str, str] = {}  # of every staged surface's plan, after the render

    def summary(self) -> str:
        parts = [f"{label} {', '.join(names)}" for label, names in
                 (("staged", self.staged), ("removed", self.removed)) if names]
        return "; ".join(parts) or "nothing changed"


def installed_surfaces(only: tuple[str, ...] | None = None, root: Path | None = None,
                       refresh: bool = False) -> dict[str, Surface]:
    """One instance of every installed surface, optionally limited to ``only``.

    Scanning the entry points of every installed distribution costs tens of
    milliseconds, which a ctl change cannot afford, so with ``root`` the result is
    remembered in the root's state dir (``NodeStore.surface_cache``) and later calls import
    the recorded classes directly; a record that no longer imports is rebuilt, and
    ``refresh`` (the daemon at start-up) always rebuilds it.
    """
    classes = _cached_surfaces(root) if root is not None and not refresh else None
    if classes is None:
        classes = discover()
        if root is not None:
            _save_surface_cache(root, classes)
    return {name: cls() for name, cls in classes.items() if only is None or name in only}


def _cached_surfaces(root: Path) -> dict[str, type[Surface]] | None:
    import importlib

    try:
        record = json.loads(NodeStore(root).surface_cache.read_text())
        found: dict[str, type[Surface]] = {}
        for name, target in record.items():
            module, _, attr = target.partition(":")
            cls = getattr(importlib.import_module(module), attr)
            if not (isinstance(cls, type) and issubclass(cls, Surface)):
                return None
            found[name] = cls
        return found
    except (OSError, ValueError, ImportError, AttributeError):
        return None


def _save_surface_cache(root: Path, classes: Mapping[str, type[Surface]]) -> None:
    path = NodeStore(root).surface_cache
    if not path.parent.is_dir():
        return
    record = {name: f"{cls.__module__}:{cls.__qualname__}" for name, cls in classes.items()}
    atomic_write(path, json.dumps(record, indent=1))


def enabled(node: Node, name: str) -> bool:
    """Whether the node wants surface ``name`` staged (surfaces the node state does not know are on)."""
    settings = node.surfaces.get(name)
    return True if settings is None else bool(settings.enabled)


def context(root: Path, booted_ms: int | None = None) -> StageContext:
    """What plans under ``root`` may need; ``booted_ms`` defaults to what the node file records."""
    booted = NodeStore(root).booted_ms() if booted_ms is None else booted_ms
    return StageContext(root=root, native_dir=native_dir(), booted_ms=booted, mig=mig_partition.partitions(root))


def with_contributions(ctx: StageContext, node: Node, surfaces: Mapping[str, Surface],
                       reuse: plan_memo.Reuse | None = None) -> StageContext:
    """``ctx`` with what every other surface gives the gpu surface to stage: its keys for the NVML state
    file, and (enabled ones) their ``/proc/devices`` lines; ``reuse``: what the last render made of them."""
    contributed = []
    char_majors: list[tuple[int, str]] = []
    for name, surface in surfaces.items():
        if name == "gpu":
            continue

        def build(name: str = name, surface: Surface = surface) -> plan_memo.Contribution:
            try:
                return surface.nvml(node, ctx), surface.char_majors(node, ctx) if enabled(node, name) else ()
            except Exception as exc:
                raise staging.StagingError(name, f"contribution to the gpu surface failed: {type(exc).__name__}: "
                                                 f"{exc}") from exc

        keys, majors = build() if reuse is None else reuse.contribution(name, surface, ctx, build)
        contributed.append(keys)
        char_majors += majors
    return ctx._replace(nvml=tuple(contributed), char_majors=tuple(char_majors))


def build_plans(node: Node, surfaces: Mapping[str, Surface], ctx: StageContext,
                stop: threading.Event | None = None, reuse: plan_memo.Reuse | None = None) -> dict[str, list[Entry]]:
    """Every surface's plan; the first failure names its surface.  ``reuse``: the parts the last render
    built that this one may take.

    With a ``stop`` event (the node daemon) the plans are built concurrently, and a
    set ``stop`` abandons the wave without waiting for stragglers (they are daemon
    threads and touch nothing on disk); plans are pure, so the threads only overlap
    where a plan does I/O.  Without one (nvml-mock-ctl) they are built one after
    another: they are CPU-bound, and threads would only add GIL hand-offs.
    """
    results: dict[str, list[Entry]] = {}
    errors: dict[str, BaseException] = {}
    done = threading.Semaphore(0)

    def build(name: str, surface: Surface) -> None:
        try:
            results[name] = list(surface.plan(node, ctx)) if reuse is None else reuse.plan(name, surface, node, ctx)
        except BaseException as exc:
            errors[name] = exc
        finally:
            done.release()

    items = list(surfaces.items())
    if len(items) == 1 or stop is None:
        for item in items:
            build(*item)
    else:
        for name, surface in items:
            threading.Thread(target=build, args=(name, surface), name=f"plan-{name}", daemon=True).start()
    for _ in items:
        while not done.acquire(timeout=0.1):
            if stop is not None and stop.is_set():
                raise Interrupted("stopped while building plans")
    for name, _ in items:
        if name in errors:
            exc = errors[name]
            if isinstance(exc, MokkaError):
                raise staging.StagingError(name, f"plan failed: {exc}") from exc
            raise staging.StagingError(name, f"plan failed: {type(exc).__name__}: {exc}") from exc
    return {name: results[name] for name, _ in items}


class Interrupted(MokkaError):
    """A stop was requested before the wave was published; nothing was."""


def entry_digests(plan: list[Entry]) -> list[str]:
    return [staging.entry_digest(entry) for entry in plan]


def plan_digest(plan: list[Entry], digests: list[str] | None = None) -> str:
    """One digest of a whole plan: each entry's type, path and ``staging.entry_digest`` (``digests``, where
    the caller has them), in order; a copy whose source cannot be read makes it new every time, so staging
    reports the error."""
    lines = [f"{type(entry).__name__}\0{entry.path}\0{published or os.urandom(16).hex()}\n"
             for entry, published in zip(plan, digests if digests is not None else entry_digests(plan), strict=True)]
    return hashlib.sha256("".join(lines).encode()).hexdigest()  # one update: the digest of the lines in order


def render(root: Path, node: Node, surfaces: Mapping[str, Surface], *, force: bool = False,
           stop: threading.Event | None = None, since: Node | None = None,
           recorded: Mapping[str, str] | None = None, booted_ms: int | None = None) -> RenderResult:
    """Bring what is staged under ``root`` in line with ``node``; all-or-nothing for what changes.

    ``since``: the node staged now, where the caller knows it (a fresh snapshot rendered with these
    surfaces); a surface whose declared reads the change does not touch keeps its staged plan.
    ``recorded``: the digests of the staged plans, where the caller has read the snapshot already.
    ``booted_ms``: when the node came up, where the node file does not say yet (the first render).
    """
    ctx = context(root, booted_ms)
    wanted = {name: surface for name, surface in surfaces.items() if enabled(node, name)}
    old = dict(recorded) if recorded is not None else snapshot.digests(root)
    staged = set(staging.staged_surfaces(root))
    touched = touched_fields(since, node) if since is not None and not force else None
    kept = {name for name, surface in wanted.items() if touched is not None and surface.reads is not None
            and not surface.reads & touched and name in staged and name in old}
    reuse = plan_memo.Reuse(root, since, touched)
    if "gpu" in wanted and "gpu" not in kept:
        ctx = with_contributions(ctx, node, surfaces, reuse)
    boot = None  # the record of a node that comes up partitioned (``mig.layout``), published with the wave
    if "gpu" in wanted and "gpu" not in staged and mig_boot.wanted(node):
        boot = mig_boot.boot_record(node, ctx)
        ctx = ctx._replace(mig=mig_boot.partitions(boot))
    plans = build_plans(node, {name: s for name, s in wanted.items() if name not in kept}, ctx, stop, reuse)
    each = {name: reuse.entry_digests(name, plan, staging.entry_digest) for name, plan in plans.items()}
    digests = {name: plan_digest(plan, each[name]) for name, plan in plans.items()}
    changed = {name: plan for name, plan in plans.items()
               if force or name not in staged or old.get(name) != digests[name]}
    if stop is not None and stop.is_set():
        raise Interrupted("stopped before publishing")
    result = RenderResult(unchanged=sorted((set(plans) | kept) - set(changed)))
    if changed:
        staging.stage_wave(changed, root, {name: each[name] for name in changed},
                           trusted={name: reuse.taken(name) for name in changed})
        result.staged = list(changed)
    if boot is not None:
        mig_boot.publish(root, boot)
    new_digests = {name: digest for name, digest in old.items() if name in staged or name in changed}
    new_digests.update(digests)
    for name in sorted(staged):
        if name in surfaces and name not in wanted:
            staging.teardown(root, name)
            new_digests.pop(name, None)
            result.removed.append(name)
    result.digests = new_digests  # the caller records them with the node (``snapshot.save``)
    reuse.remember(node)
    return result


def touched_fields(before: Node, after: Node) -> frozenset[str] | None:
    """The GPU configuration fields that differ between two nodes; None if anything else differs too."""
    if len(before.gpus) != len(after.gpus):
        return None
    if any(_differ(getattr(before, name), getattr(after, name)) for name in before.__slots__ if name != "gpus"):
        return None
    touched: set[str] = set()
    for old, new in zip(before.gpus, after.gpus, strict=True):
        if old is new:  # nodes share what an override leaves alone: most of a change compares by identity
            continue
        if any(getattr(old, name) != getattr(new, name) for name in old.__slots__ if name != "config"):
            return None
        if old.config is not new.config:
            touched.update(name for name in old.config.__slots__
                           if _differ(getattr(old.config, name), getattr(new.config, name)))
    return frozenset(touched)


def _differ(old: object, new: object) -> bool:
    return old is not new and old != new


def services(node: Node, surfaces: Mapping[str, Surface], root: Path,
             host_kmsg: str | None = None) -> dict[str, tuple[str, Service]]:
    """The long-lived programs of every enabled surface, by program name: {program: (surface, service)}."""
    ctx = context(root)._replace(host_kmsg=host_kmsg)
    found: dict[str, tuple[str, Service]] = {}
    for name, surface in surfaces.items():
        if not enabled(node, name):
            continue
        for service in surface.services(node, ctx):
            if service.name in found:
                owner = found[service.name][0]
                raise staging.StagingError(name, f"service name {service.name!r} is also used by {owner}")
            found[service.name] = (name, service)
    return found


def consumer_needs(node: Node, surfaces: Mapping[str, Surface], root: Path) -> ConsumerNeeds:
    """What a consumer process of the node needs, from every enabled surface together."""
    ctx = context(root)
    return ConsumerNeeds.combine(surface.consumer(node, ctx) for name, surface in surfaces.items()
                                 if enabled(node, name))
