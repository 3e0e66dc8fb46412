"""The node daemon's one run loop: ``run(settings, stop_flag, ready_flag)``.

Stage every enabled surface in one all-or-nothing wave (plans built in parallel),
write the node file, start the surfaces' services under supervisord, mark ready,
then re-render on every change of the profile, overlay, surfaces or override file, and
re-stage what follows the NVML setter record (MIG partitions made by nvidia-smi) on every
change of it, until ``stop_flag`` is set.  Whatever happens, a started node is torn down before
``run`` returns.  A node with nothing to do for ``settings.rest_after_s`` rests: from the main thread,
``run`` execs the daemon's lean form (``node.rest``), which execs the daemon again when there is work,
and that ``run`` (``settings.resume``) adopts the running node instead of staging one.  Signals are not
handled here: ``mokka node up`` (``cli.node``, through ``node.foreground``) turns SIGTERM/SIGINT into
``stop_flag.set()``, and tests drive ``run`` from a thread (``mokka_core.testing.runner.DaemonRunner``).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

from ..errors import MokkaError
from ..model.apply import apply
from ..model.node import Node
from ..model.spec import NodeSpec
from ..stage import nodefile, snapshot, staging
from ..stage.beneath import Beneath, make_root
from ..stage.paths import NVML_SETTINGS_FILE
from ..stage.render import Interrupted, installed_surfaces, render, services
from ..stage.store import OVERRIDE_FILE, STATE_DIR, NodeStore
from ..stage.surface import Service, Surface
from . import cdi_link, runstate
from .logstream import NODE_LOG_MAX_BYTES, LogStream
from .relay import CtlSocket
from .runstate import RunState, process_start_ticks
from .settings import NodeSettings
from .supervise import Supervisor
from .teardown import teardown_node
from .watch import observe

log = logging.getLogger(__name__)

class NodeBusy(MokkaError):
    """Another daemon already runs a node under this root."""


def run(settings: NodeSettings, stop_flag: threading.Event, ready_flag: threading.Event | None = None,
        surfaces: Mapping[str, Surface] | None = None) -> None:
    """Run a node until ``stop_flag`` is set; raises (after cleaning up) if the node cannot start.

    ``surfaces`` replaces discovery of installed surfaces (tests inject broken ones).
    """
    root = settings.root.absolute()
    made = not os.path.isdir(root)
    make_root(root)  # before anything is written there: a root no other user controls
    os.umask(os.umask(0o022) | 0o022)  # and nothing made under it writable by others (modes set on purpose stay)
    spec = nodefile.rooted(settings.spec, root)
    state = _claim(root, resumed=settings.resume is not None, made_root=made)
    logs = LogStream(root, settings.log_echo)
    with logs.daemon_records():
        _run_claimed(settings, root, spec, state, logs, stop_flag, ready_flag, surfaces)


def _run_claimed(settings: NodeSettings, root: Path, spec: NodeSpec, state: RunState, logs: LogStream,
                 stop_flag: threading.Event, ready_flag: threading.Event | None,
                 surfaces: Mapping[str, Surface] | None) -> None:
    wake = threading.Event()
    observer = record_observer = None
    supervisor = Supervisor(root)
    ctl_socket = CtlSocket(root, settings.ctl) if settings.ctl is not None else None
    resume = settings.resume
    failed = False
    try:
        if resume is not None and resume.get("stop"):
            stop_flag.set()  # a stop signal woke the lean form: the node goes down as from here
        logs.open(_handed_logs(resume))
        chosen = dict(surfaces) if surfaces is not None else installed_surfaces(settings.only, root,
                                                                                 refresh=resume is None)
        watched = [p for p in (spec.profile_file, spec.overlay_file, spec.surfaces_file, spec.override_file)
                   if p is not None]
        record = [root / NVML_SETTINGS_FILE]
        # watch before the first read, so a change made while the node comes up wakes the loop at once
        observer = _observe(watched, wake) if settings.watch else None
        if resume is None:
            # imported here: the profile schema is most of what a daemon back from rest would import, and
            # the change a ctl rendered (its snapshot fresh) needs none of it
            from ..model.resolve import resolve_parts

            with NodeStore(root).lock():
                left = staging.recover(root)  # what a SIGKILLed start left, before this one stages
                if left:
                    raise MokkaError(f"an interrupted staging left what cannot be removed: {', '.join(left)}")
                seen = _signature(watched)  # before reading: a change racing the start is re-rendered
                inputs = spec.inputs()
                base, doc = resolve_parts(inputs)
                node = apply(base, doc)
                started, booted_ms = time.monotonic(), time.time_ns() // 1_000_000
                result = render(root, node, chosen, force=True, stop=stop_flag, booted_ms=booted_ms)
                nodefile.save(root, spec, booted_ms)
                snapshot.save(root, base, Path(inputs.override_source), doc, inputs.fingerprints, chosen,
                              result.digests)
                # the record's directory exists once the gpu surface is staged: watched from here on
                record_observer = _observe(record, wake) if settings.watch else None
                seen += _signature(record)
            log.info("node %s: %d GPU(s), published %s in %.0f ms", node.node_name, len(node.gpus),
                     ", ".join(result.staged) or "no surfaces", (time.monotonic() - started) * 1000)
            if settings.cdi_spec_dir is not None:
                state.cdi_link = str(cdi_link.make(Path(settings.cdi_spec_dir), root))
                state.save(root)
            programs = _programs(node, chosen, root, settings) if settings.supervise else {}
            state.services = _owners(node, chosen, root) if settings.supervise else {}
            _record_service_files(state, programs)
            if programs and not stop_flag.is_set():
                supervisor.write_config(programs, settings.service_stop_wait_s)
                supervisor.start()
        else:
            record_observer = _observe(record, wake) if settings.watch else None
            seen, programs = _adopt(resume, supervisor)
        if ctl_socket is not None:
            ctl_socket.start(resume.get("ctl_fd") if resume is not None else None)
        state.resting = False
        _set_phase(root, state, runstate.READY)
        if ready_flag is not None:
            ready_flag.set()
        resting = _watch_loop(settings, root, spec, chosen, supervisor, programs, stop_flag, state,
                              [*watched, *record], seen, wake,
                              ctl_socket.idle_since if ctl_socket is not None else time.monotonic,
                              check_now=resume is not None)
        if resting is not None:
            for watcher in (observer, record_observer):
                if watcher is not None:
                    watcher.stop()
                    watcher.join(timeout=2)
            observer = record_observer = None
            _rest(settings, root, state, logs, ctl_socket, supervisor, resting, stop_flag)
    except Interrupted:
        log.info("stopped before the node was published; nothing was")
    except BaseException as exc:
        failed = True
        state.error = str(exc)
        _set_phase(root, state, runstate.FAILED)
        raise
    finally:
        if ctl_socket is not None:
            ctl_socket.close()
        for watcher in (observer, record_observer):
            if watcher is not None:
                watcher.stop()
                watcher.join(timeout=2)
        state.resting = False
        _set_phase(root, state, runstate.STOPPING)
        deadline = time.monotonic() + settings.teardown_deadline_s
        done = teardown_node(root, deadline, supervisor, state, logs)
        if done.left:
            unfinished = (f"node not torn down completely, left: {', '.join(done.left)}; "
                          f"`mokka node down --root {root}` once the root is writable")
            if not failed:
                raise MokkaError(unfinished)
            log.error("%s", unfinished)  # the failure in flight says why the node went
        log.info("node torn down (%s)", ", ".join(done.removed) or "nothing was staged")


class Resting(NamedTuple):
    """What the watch loop knew when the node came to rest."""

    programs: dict[str, Service]
    seen: tuple[tuple[int, int, int] | None, ...]
    watched: list[Path]


def _rest(settings: NodeSettings, root: Path, state: RunState, logs: LogStream, ctl_socket: CtlSocket | None,
          supervisor: Supervisor, resting: Resting, stop_flag: threading.Event) -> NoReturn:
    """Exec the lean form (``node.rest``), handing over what it and the daemon after it need; never returns."""
    from . import rest

    store = NodeStore(root)
    handover: dict[str, Any] = {
        "executable": sys.executable, "argv": list(sys.orig_argv),
        "supervisord": supervisor.process.pid if supervisor.process is not None else supervisor.adopted,
        "watched": [str(path) for path in resting.watched] if settings.watch else [],
        "seen": [list(sig) if sig is not None else None for sig in resting.seen] if settings.watch else [],
        "poll_s": settings.poll_s, "log_dir": str(store.log_dir), "node_log": str(store.node_log),
        "node_log_max": NODE_LOG_MAX_BYTES, "echo": settings.log_echo is sys.stdout,
        "programs": {name: {"command": list(service.command), "environment": dict(service.environment),
                            "ready_path": service.ready_path} for name, service in resting.programs.items()},
        "stop": None, "reason": None,
    }
    state.resting = True
    _set_phase(root, state, runstate.READY)
    log.info("at rest (pid %d): nothing to do for %.0f s", os.getpid(), settings.rest_after_s or 0)
    handover["ctl_fd"] = ctl_socket.detach() if ctl_socket is not None else None
    handover["logs"] = logs.suspend()
    others = [t.name for t in threading.enumerate() if t is not threading.current_thread() and t.name != QUIET]
    if others:  # a signal one of them takes would be lost at exec (none is expected)
        log.warning("threads still running as the daemon rests: %s", ", ".join(others))
    signal.pthread_sigmask(signal.SIG_BLOCK, rest.SIGNALS)  # from here a signal stays pending, across exec
    if stop_flag.is_set():  # taken before the block: the lean form wakes the daemon at once to stop
        handover["stop"] = int(signal.SIGTERM)
    rest.enter(handover)


def _handed_logs(resume: Mapping[str, Any] | None) -> dict[str, int] | None:
    if resume is None:
        return None
    logs = resume.get("logs")
    return {str(k): int(v) for k, v in logs.items()} if isinstance(logs, dict) else None


def _adopt(resume: Mapping[str, Any], supervisor: Supervisor
           ) -> tuple[tuple[tuple[int, int, int] | None, ...], dict[str, Service]]:
    """Take over the node the daemon ran before it rested: the signatures it had seen, the programs
    supervisord runs (adopted by pid; nothing is staged again)."""
    log.info("awake (pid %d): %s", os.getpid(), resume.get("reason") or "no reason given")
    seen = tuple(tuple(sig) if sig is not None else None for sig in resume.get("seen", []))
    programs = {str(name): Service(str(name), list(p["command"]), dict(p["environment"]), p["ready_path"])
                for name, p in resume.get("programs", {}).items()}
    pid = resume.get("supervisord")
    if pid is not None:
        supervisor.adopt(int(pid))
    elif programs:
        log.error("supervisord is gone (it exited while the node rested): its services do not run")
    return seen, programs


def _claim(root: Path, resumed: bool = False, made_root: bool = False) -> RunState:
    """Write the run state; refuse if a live daemon already owns this root (``resumed``: but this process,
    back from rest; ``made_root``: the root was made for this node, so teardown removes it)."""
    existing = RunState.load(root)
    if resumed and existing is not None and existing.pid == os.getpid() and existing.daemon_alive():
        return existing
    if existing is not None and existing.daemon_alive():
        raise NodeBusy(f"a node daemon (pid {existing.pid}) already runs under {root}; `mokka node down --root {root}`")
    created = [""] if made_root else []
    for rel in _ancestors(STATE_DIR):
        if not (root / rel).is_dir():
            created.append(rel)
    preexisting = [OVERRIDE_FILE] if NodeStore(root).override_file.exists() else []
    if existing is not None:  # a dead daemon's leftovers: keep what it recorded as not ours
        created = existing.created_dirs
        preexisting = existing.preexisting
    state = RunState(pid=os.getpid(), start_ticks=process_start_ticks(os.getpid()),
                     created_dirs=created, preexisting=preexisting)
    try:
        with Beneath(root) as walk:
            walk.dir(STATE_DIR, [])  # made here never through a link, nor into a directory others may write
        state.save(root)
    except OSError as exc:
        raise MokkaError(f"cannot record the node under {root}: {exc.strerror} ({exc.filename}); "
                         "the root must be writable") from None
    return state


def _ancestors(rel: str) -> list[str]:
    parts = rel.split("/")
    return ["/".join(parts[: n + 1]) for n in range(len(parts))]


def _set_phase(root: Path, state: RunState, phase: str) -> None:
    state.phase = phase
    try:
        state.save(root)
    except OSError as exc:
        log.warning("cannot record phase %s: %s", phase, exc)


def _programs(node: Node, chosen: Mapping[str, Surface], root: Path, settings: NodeSettings) -> dict[str, Service]:
    return {name: service for name, (_, service) in services(node, chosen, root, settings.host_kmsg).items()}


def _owners(node: Node, chosen: Mapping[str, Surface], root: Path) -> dict[str, str]:
    return {name: surface for name, (surface, _) in services(node, chosen, root).items()}


def _record_service_files(state: RunState, programs: Mapping[str, Service]) -> None:
    """Every marker a service of this node has written, for teardown (one that went keeps its place)."""
    ready = [str(service.ready_path) for service in programs.values() if service.ready_path is not None]
    state.service_files = sorted({*state.service_files, *ready})


def _signature(paths: list[Path]) -> tuple[tuple[int, int, int] | None, ...]:
    out: list[tuple[int, int, int] | None] = []
    for path in paths:
        try:
            st = path.stat()
            out.append((st.st_ino, st.st_mtime_ns, st.st_size))
        except OSError:
            out.append(None)
    return tuple(out)


def _watch_loop(settings: NodeSettings, root: Path, spec: NodeSpec, chosen: Mapping[str, Surface],
                supervisor: Supervisor, programs: dict[str, Service], stop_flag: threading.Event,
                state: RunState, watched: list[Path], last: tuple[tuple[int, int, int] | None, ...],
                wake: threading.Event, idle_since: Callable[[], float], check_now: bool = False) -> Resting | None:
    """Re-render every change until ``stop_flag`` (None), or until the node has had nothing to do for
    ``settings.rest_after_s`` (what the daemon knows, to rest); ``check_now``: compare the files at once."""
    # a node at rest sleeps: the loop wakes for a stop request, a watcher event or the next poll, never on a tick
    _quiet_thread(_wake_when_set, stop_flag, wake)
    rests = settings.rest_after_s is not None and threading.current_thread() is threading.main_thread()
    quiet_since = time.monotonic()
    next_poll = quiet_since if check_now else quiet_since + settings.poll_s
    while not stop_flag.is_set():
        rest_at = max(quiet_since, idle_since()) + (settings.rest_after_s or 0) if rests else None
        due = [at for at in (next_poll if settings.watch else None, rest_at) if at is not None]
        woken = wake.wait(max(0.0, min(due) - time.monotonic()) if due else None)
        if stop_flag.is_set():
            continue
        if woken:
            time.sleep(settings.debounce_s)
            wake.clear()
        if settings.watch and (woken or time.monotonic() >= next_poll):
            next_poll = time.monotonic() + settings.poll_s
            current = _signature(watched)
            if current != last:
                _set_phase(root, state, runstate.RELOADING)
                inputs_changed, record_changed = current[:-1] != last[:-1], current[-1] != last[-1]
                last = current
                if inputs_changed:
                    programs = _rerender(settings, root, spec, chosen, supervisor, programs, stop_flag, state)
                if record_changed:
                    _follow_record(root, chosen, stop_flag)
                _set_phase(root, state, runstate.READY)
                quiet_since = time.monotonic()
                continue
        if rests and time.monotonic() >= max(quiet_since, idle_since()) + (settings.rest_after_s or 0):
            return Resting(programs, last, watched)
    return None


#: the thread that wakes the watch loop on a stop request; it takes no signal (see ``_rest``)
QUIET = "stop-wakes-loop"


def _quiet_thread(target: Callable[..., None], *args: Any) -> None:
    """A daemon thread with the rest signals blocked: one it took would be lost when the daemon execs."""
    from .rest import SIGNALS

    old = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    try:
        threading.Thread(target=target, args=args, name=QUIET, daemon=True).start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _wake_when_set(flag: threading.Event, wake: threading.Event) -> None:
    flag.wait()
    wake.set()


def _rerender(settings: NodeSettings, root: Path, spec: NodeSpec, chosen: Mapping[str, Surface],
              supervisor: Supervisor, programs: dict[str, Service], stop_flag: threading.Event,
              state: RunState) -> dict[str, Service]:
    """Re-render what changed; a bad input file is logged and the node keeps its last good state.

    A change nvml-mock-ctl made is rendered already: its snapshot is fresh (every input file as
    the ctl left it) and was rendered with this daemon's surfaces, so only the services are
    brought in line, and the next ctl change need not wait for a second render of this one.
    (A writer that renders other surfaces, such as the allocation watcher that renders none,
    leaves a snapshot this daemon renders after all.)
    """
    try:
        with NodeStore(root).lock():
            fresh = snapshot.record(root)  # the node is decoded after the lock: the next change need not wait
            if fresh is None or fresh["rendered_with"] != snapshot.surface_ids(chosen):
                fresh = None
                node = _render_files(root, spec, chosen, stop_flag)
        followed = snapshot.from_record(fresh) if fresh is not None else None
        if followed is not None:
            node = followed.node()
            log.info("re-rendered: nothing changed (the writer of the change rendered it)")
        elif fresh is not None:  # fresh but no node in it (edited by hand): the files decide
            with NodeStore(root).lock():
                node = _render_files(root, spec, chosen, stop_flag)
    except Interrupted:
        return programs
    except MokkaError as exc:
        log.error("change not applied, node keeps its last good state: %s", exc)
        return programs
    except Exception as exc:  # any defect while re-rendering: the node stays up as it was
        log.error("change not applied, node keeps its last good state: %s: %s", type(exc).__name__, exc,
                  exc_info=log.isEnabledFor(logging.DEBUG))
        return programs
    if not settings.supervise:
        return programs
    wanted = _programs(node, chosen, root, settings)
    if wanted != programs:
        supervisor.write_config(wanted, settings.service_stop_wait_s)
        if not supervisor.running and wanted:
            supervisor.start()
        elif supervisor.running:
            supervisor.update()
        state.services = _owners(node, chosen, root)
        _record_service_files(state, wanted)
        log.info("services now: %s", ", ".join(sorted(wanted)) or "none")
    return wanted


def _follow_record(root: Path, chosen: Mapping[str, Surface], stop_flag: threading.Event) -> None:
    """Re-stage what follows the NVML setter record (the last watched path): a partition nvidia-smi changed."""
    from ..stage.restage import restage

    try:
        with NodeStore(root).lock():
            result = restage(root, chosen, stop_flag)
        if result is not None:
            log.info("setter record changed, re-rendered: %s", result.summary())
    except Interrupted:
        return
    except Exception as exc:  # the node stays up as it was, as for a bad input file
        log.error("setter record change not followed: %s: %s", type(exc).__name__, exc)


def _render_files(root: Path, spec: NodeSpec, chosen: Mapping[str, Surface], stop_flag: threading.Event) -> Node:
    """Resolve the node from its files, render what changed and record it (caller holds the node lock)."""
    from ..model.resolve import resolve_parts

    inputs = spec.inputs()
    base, doc = resolve_parts(inputs)
    node = apply(base, doc)
    result = render(root, node, chosen, stop=stop_flag)
    snapshot.save(root, base, Path(inputs.override_source), doc, inputs.fingerprints, chosen, result.digests)
    log.info("re-rendered: %s", result.summary())
    return node


def _observe(paths: list[Path], wake: threading.Event) -> Any:
    """A watchdog observer that wakes the loop on any event in the directories of ``paths``.

    Any event, not only one naming a watched file: a Kubernetes ConfigMap volume
    updates ``profile.yaml`` and ``surfaces.yaml`` by swapping a ``..data`` symlink,
    and no event names the file itself.  The loop compares the files' signatures, so noise costs a
    few ``stat`` calls and nothing more.
    """
    return observe((str(p.absolute().parent) for p in paths), lambda _path: wake.set())
