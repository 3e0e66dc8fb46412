"""Remove every trace of a node under a root: services, staged surfaces, bookkeeping, created dirs.

Works the same whether the daemon is stopping itself, or ``mokka node down`` cleans
up after a daemon that was SIGKILLed (then only the files on disk are left to go by).
Every step is idempotent, so an interrupted teardown can simply be run again: what cannot be
removed (a root gone read-only) is reported, and the run state, which says what the node left,
goes last, so a later ``mokka node down`` removes the rest.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..stage import staging
from ..stage.beneath import Beneath, UnsafePath
from ..stage.store import STATE_DIR, NodeStore, write_temps
from . import cdi_link
from .logstream import LogStream
from .runstate import RunState
from .supervise import Supervisor, socket_path

log = logging.getLogger(__name__)


@dataclass
class TornDown:
    removed: list[str] = field(default_factory=list)  # the surfaces removed
    left: list[str] = field(default_factory=list)  # what could not be removed, relative to the root


def teardown_node(root: Path, deadline: float, supervisor: Supervisor | None = None,
                  run_state: RunState | None = None, logs: LogStream | None = None) -> TornDown:
    """Tear the node down by ``deadline`` (monotonic); says which surfaces went and what is left.

    ``logs``, the daemon's log stream, forwards the services' last lines before their files go."""
    run_state = run_state or RunState.load(root)
    (supervisor or Supervisor(root)).stop(deadline)
    if logs is not None:
        logs.close()
    done = TornDown()
    # the services are stopped: their markers go (a killed service, or one on a root gone read-only, left them)
    for rel in run_state.service_files if run_state else []:
        _unlink_beneath(root, rel, done.left)
    if run_state is not None and run_state.cdi_link is not None and not cdi_link.remove(run_state.cdi_link, root):
        done.left.append(run_state.cdi_link)
    try:
        done.removed = staging.teardown_all(root)
    except Exception as exc:
        log.error("teardown of the staged surfaces failed: %s", exc)
        for name in staging.staged_surfaces(root):  # one by one: what can go, goes
            try:
                staging.teardown(root, name)
                done.removed.append(name)
            except Exception as each:
                log.error("teardown of surface %s failed: %s", name, each)
                done.left.append(f"surface {name}")
    store = NodeStore(root)
    keep = {root / rel for rel in run_state.preexisting} if run_state else {store.override_file}
    for path in [*store.bookkeeping, socket_path(root)]:
        if path not in keep and path != store.daemon_file:
            _unlink(root, path, done.left)
    for directory in (store.dir, store.run_dir):  # a write killed before its rename left its temp file
        for temp in write_temps(directory):
            _unlink(root, temp, done.left)
    _remove_log_dir(root, store.log_dir, done.left)
    if done.left:  # the run state stays, so that a later `mokka node down` finds the rest
        return done
    # the services' markers' folder: a surface may stage it (the fabric manager's), else a service made it
    with contextlib.suppress(OSError, UnsafePath), Beneath(root) as walk:
        walk.rmdir(store.run_dir.relative_to(root).as_posix())
    if store.daemon_file not in keep:
        _unlink(root, store.daemon_file, done.left)
    for rel in reversed(run_state.created_dirs if run_state else _unrecorded_dirs()):
        if rel != "" and not staging.plain_path(rel):  # "": the root itself, which `up` made
            done.left.append(f"{rel!r} (the run state lists it: not a plain relative path, refused)")
            continue
        try:
            if rel == "":
                root.rmdir()
            else:
                with Beneath(root) as walk:
                    walk.rmdir(rel)
        except UnsafePath as exc:
            done.left.append(str(exc))
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT):  # not empty: not ours lives there
                done.left.append(rel)
    if time.monotonic() > deadline:
        log.warning("teardown overran its deadline")
    return done


def _unrecorded_dirs() -> list[str]:
    """What a daemon killed before its run state landed may have made (outermost first): the state dir and
    its ancestors, each removed only if empty (a directory something else lives in stays)."""
    parts = STATE_DIR.split("/")
    return ["/".join(parts[: n + 1]) for n in range(len(parts))]


def _remove_log_dir(root: Path, log_dir: Path, left: list[str]) -> None:
    """The log dir holds only the node's logs and their rotated files: all of it goes."""
    try:
        logs = list(log_dir.iterdir())
    except FileNotFoundError:
        return
    except OSError:
        left.append(str(log_dir.relative_to(root)))
        return
    for path in logs:
        _unlink(root, path, left)
    rel = log_dir.relative_to(root).as_posix()
    try:
        with Beneath(root) as walk:
            walk.rmdir(rel)
    except UnsafePath as exc:
        left.append(str(exc))
    except OSError:
        left.append(rel)


def _unlink_beneath(root: Path, rel: object, left: list[str]) -> None:
    """Remove ``rel``, a path the run state lists, only where it is a plain relative path reached through no link."""
    if not staging.plain_path(rel):
        left.append(f"{rel!r} (the run state lists it: not a plain relative path, refused)")
        return
    assert isinstance(rel, str)
    try:
        with Beneath(root) as walk:
            walk.remove(rel)
    except FileNotFoundError:
        pass  # the root itself is gone
    except UnsafePath as exc:
        left.append(str(exc))
    except OSError:
        left.append(rel)


def _unlink(root: Path, path: Path, left: list[str]) -> None:
    """Remove one of Mokka's own files: under the root reached through no link; elsewhere (supervisord's socket
    in the temp dir, for a root whose path is too long for one) at the name Mokka gave it."""
    if path.is_relative_to(root):
        _unlink_beneath(root, path.relative_to(root).as_posix(), left)
        return
    try:
        path.unlink(missing_ok=True)
    except OSError:
        left.append(str(path))
