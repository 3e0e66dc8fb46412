"""A node's surface services as plain child processes, for ``mokka run``, ``mokka shim`` and ``mokka-sim-X serve``.

The same :class:`~mokka_core.stage.surface.Service` entries ``mokka node up`` gives
supervisord, run the way supervisord runs them: each in its own process group with
``MOKKA_ROOT`` set, stopped with SIGTERM to the group, a bounded wait, then SIGKILL.
Each gets SIGTERM when the process that started it dies, even by SIGKILL (``PR_SET_PDEATHSIG``): every
service starts through the launcher ``mokka-enter`` (``native/enter``), which ties it and enters the node's
namespace, so that no Python runs between fork and exec.  The kernel sends that SIGTERM when the starting
*thread* exits: start services from a thread that outlives them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from ..errors import MokkaError
from ..stage.native import native_program
from ..stage.surface import Service
from .prestart import runs_a_module

log = logging.getLogger(__name__)

#: the program every service is started through (native/enter)
LAUNCHER = "mokka-enter"
#: how long a service may take to become ready (its ``ready_path`` appears)
READY_TIMEOUT_S = 30.0
#: how often readiness is looked at: first after 1 ms (a native service is ready in a few), then less often
READY_FIRST_POLL_S = 0.001
READY_POLL_S = 0.01
#: how long a service may take to exit after SIGTERM before its group is killed
STOP_WAIT_S = 5.0


class ServiceFailed(MokkaError):
    """A service exited or did not become ready in time."""


class Services:
    """The started services of one root; always :meth:`stop` them (or use as a context manager)."""

    def __init__(self, root: Path, services: Mapping[str, Service], *, log_path: Path | None = None) -> None:
        self.root = root
        self.services = dict(services)
        self.log_path = log_path  # None: the services write to our stdout and stderr
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self._held: list[int] = []  # write ends of the held services' gates (``mokka_core.run.prestart``)
        self._later: list[tuple[str, Service]] = []  # held start: the programs :meth:`release` starts

    def __enter__(self) -> Services:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, *, held: bool = False) -> None:
        """Start every service.

        ``held``: each ``python -m MODULE`` service that is waited for (it has a ``ready_path``) starts its
        interpreter and imports its module, then waits for :meth:`release` (:mod:`mokka_core.run.prestart`),
        so that start-up overlaps what the caller does meanwhile; any other is started by :meth:`release`
        itself (a native program starts in a few ms, and nothing waits for the others).
        """
        chosen = sorted(self.services.items())
        if held:
            self._later = [(name, service) for name, service in chosen if not _worth_holding(service)]
            chosen = [(name, service) for name, service in chosen if _worth_holding(service)]
        self._spawn(chosen, None, held)

    def _spawn(self, services: list[tuple[str, Service]], joining: tuple[int, bool] | None, held: bool) -> None:
        """Start ``services`` through the launcher (``native/enter``): tied to this process, in the namespace
        of ``joining``'s (pid, rootless) where given."""
        tie = [launcher(), str(os.getpid())]
        if joining is not None:
            tie += [str(joining[0]), "1" if joining[1] else "0"]
        output = open(self.log_path, "ab") if self.log_path is not None else None  # noqa: SIM115
        try:
            for name, service in services:
                env = {**os.environ, "MOKKA_ROOT": str(self.root.absolute()), **service.environment}
                command, gate = list(service.command), None
                if held:
                    gate, release = os.pipe2(os.O_CLOEXEC)
                    self._held.append(release)
                    command = [sys.executable, "-m", "mokka_core.run.prestart", str(gate), "--", *command]
                try:
                    self.processes[name] = subprocess.Popen(
                        [*tie, "--", *command], env=env, start_new_session=True,
                        pass_fds=() if gate is None else (gate,),
                        stdout=output, stderr=subprocess.STDOUT if output is not None else None)
                except (OSError, subprocess.SubprocessError) as exc:
                    raise ServiceFailed(f"service {name} could not start: {exc}") from None
                finally:
                    if gate is not None:
                        os.close(gate)
                log.debug("started %s (pid %d)", name, self.processes[name].pid)
        finally:
            if output is not None:
                output.close()

    def release(self, joining: tuple[int, bool] | None = None) -> None:
        """Let the held services run (see :meth:`start`) and start the others; ``joining``: (pid, rootless)
        of the process whose mount (and, rootless, user) namespace they enter first."""
        word = b"go" if joining is None else f"{joining[0]} {int(joining[1])}".encode()
        for release in self._held:
            with contextlib.suppress(BrokenPipeError):  # it exited already: wait_ready says so
                os.write(release, word)
        self._close_gates()
        later, self._later = self._later, []
        self._spawn(later, joining, held=False)

    def _close_gates(self) -> None:
        for release in self._held:
            os.close(release)
        self._held = []

    def wait_ready(self, timeout: float = READY_TIMEOUT_S, interrupted: Callable[[], bool] = lambda: False,
                   seen_from: Path = Path("/")) -> None:
        """Return once every service with a ``ready_path`` has it; raise if one exits or ``timeout`` passes.

        ``seen_from``: the file-system root the services see (``/proc/<pid>/root`` of a process in
        their mount namespace, when that is not ours).
        """
        deadline = time.monotonic() + timeout
        root = seen_from / self.root.absolute().relative_to("/")
        waiting = {name for name, service in self.services.items() if service.ready_path is not None}
        pause = READY_FIRST_POLL_S
        while True:
            self._raise_if_exited()
            waiting = {name for name in waiting if not (root / str(self.services[name].ready_path)).exists()}
            if not waiting or interrupted():
                return
            if time.monotonic() > deadline:
                raise ServiceFailed(f"service(s) {', '.join(sorted(waiting))} not ready within {timeout:g} s"
                                    + self._log_tail())
            time.sleep(pause)
            pause = min(pause * 2, READY_POLL_S)

    def exited(self) -> str | None:
        """The name of a service that has exited, if any."""
        return next((name for name, process in self.processes.items() if process.poll() is not None), None)

    def _raise_if_exited(self) -> None:
        name = self.exited()
        if name is not None:
            raise ServiceFailed(f"service {name} exited with status {self.processes[name].returncode}"
                                + self._log_tail())

    def _log_tail(self, lines: int = 10) -> str:
        if self.log_path is None:
            return ""
        try:
            tail = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return ""
        return "".join(f"\n  {line}" for line in tail)

    def stop(self, wait: float = STOP_WAIT_S) -> None:
        """SIGTERM every service's process group, wait up to ``wait`` seconds, then SIGKILL what is left."""
        started = time.monotonic()
        self._close_gates()  # a held service never let go exits on its own
        for process in self.processes.values():
            _signal_group(process, signal.SIGTERM)
        left = _wait_for_exits(list(self.processes.values()), wait)
        for name, process in self.processes.items():
            if process in left:
                log.warning("service %s did not stop within %g s; killing it", name, wait)
            _signal_group(process, signal.SIGKILL)  # also what it left running in its group
            process.wait()
        if self.processes:
            log.debug("phase stop: %.3fs (%d services)", time.monotonic() - started, len(self.processes))
        self.processes = {}


def _wait_for_exits(processes: list[subprocess.Popen[bytes]], wait: float) -> set[subprocess.Popen[bytes]]:
    """Wait until every process has exited, at most ``wait`` seconds; those still running.

    Woken by each exit itself (a pidfd per process), not by polling: stopping costs what the services take.
    """
    deadline = time.monotonic() + wait
    poller = select.poll()
    fds: dict[int, subprocess.Popen[bytes]] = {}
    try:
        for process in processes:
            if process.poll() is not None:  # reaped: its pid may be another process's by now
                continue
            try:
                fd = os.pidfd_open(process.pid)  # ours to reap, so the pid stays this process's
            except OSError:  # no pidfds (kernel before 5.3): the bounded wait polls
                return _poll_for_exits(processes, deadline)
            fds[fd] = process
            poller.register(fd, select.POLLIN)
        while fds and (remaining := deadline - time.monotonic()) > 0:
            for fd, _ in poller.poll(remaining * 1000):
                poller.unregister(fd)
                os.close(fd)
                fds.pop(fd).wait()
        return set(fds.values())
    finally:
        for fd in fds:
            os.close(fd)


def _poll_for_exits(processes: list[subprocess.Popen[bytes]], deadline: float) -> set[subprocess.Popen[bytes]]:
    left = set()
    for process in processes:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            left.add(process)
    return left


def launcher() -> str:
    """mokka-enter, as :func:`native_program` finds it."""
    program = native_program(LAUNCHER)
    if program is not None:
        return str(program)
    raise ServiceFailed(f"the service launcher {LAUNCHER} is not built (make -C native install)")


def _worth_holding(service: Service) -> bool:
    return service.ready_path is not None and runs_a_module(service.command)


def _signal_group(process: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)
