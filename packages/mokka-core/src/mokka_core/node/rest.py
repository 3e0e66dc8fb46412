"""The node daemon at rest: a lean program in the daemon's own process, until there is work.

A node that has been ready with nothing to do for ``NodeSettings.rest_after_s`` needs none of the
node code it imported, and Python never unloads it.  So the daemon (in its main thread, every other
thread stopped) execs this file on the standard library alone, ``python -I -S rest.py``, and hands
over a record in ``$MOKKA_NODE_HANDOVER``.  The pid stays: supervisord stays its child (its
``PR_SET_PDEATHSIG`` holds), and the run state, the chart's probe and ``mokka node down`` go on as before.

At rest it sleeps in ``poll`` on the ctl socket and a self-pipe of SIGTERM, SIGINT and SIGCHLD, and
every ``poll_s`` re-stats the watched files and forwards the services' new log lines to the node log.
On any work (a client on the ctl socket, which waits there to be accepted; a changed file; a stop
signal; supervisord gone; the node log due for rotation; anything it cannot make sense of) it execs the
daemon's own command line again with the record and the reason, and the daemon adopts the running
node (``node.daemon``) instead of staging one.  Signals are blocked across each exec: the new image
gets the pending ones once it has its handlers.

The record (JSON): ``executable`` and ``argv`` (the daemon's command line), ``ctl_fd`` (the listening
socket, or null), ``supervisord`` (its pid, or null), ``watched`` and ``seen`` (paths and their
``[inode, mtime_ns, size]`` signatures, null for a missing file), ``poll_s``, ``log_dir`` and
``node_log`` (paths), ``node_log_max`` (bytes), ``logs`` (``{source: fd}``: each service's log open
at the first line not forwarded yet), ``echo`` (whether forwarded lines also go to stdout),
``programs`` (what supervisord runs, kept for the daemon), ``stop`` (a signal number to stop with)
and ``reason`` (why the daemon is woken).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
import time

if __package__:
    from .tail import Tail, prefixed
else:  # the lean form, run as a file: its sibling is the one module it needs (after the standard library)
    sys.path.append(os.path.dirname(os.path.abspath(__file__)))
    from tail import Tail, prefixed  # type: ignore[no-redef]

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NoReturn

ENV = "MOKKA_NODE_HANDOVER"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: blocked across every exec, so that none is lost while there is no handler
SIGNALS = (*STOP_SIGNALS, signal.SIGCHLD)


def take() -> dict[str, Any] | None:
    """The record a daemon was exec'd with from rest (removed from the environment: children never see it);
    None for a daemon started afresh.  Raises ValueError for a record that is not one."""
    text = os.environ.pop(ENV, None)
    if text is None:
        return None
    record = json.loads(text)
    if not isinstance(record, dict):
        raise ValueError(f"${ENV} is not a handover record")
    return record


def enter(record: dict[str, Any]) -> NoReturn:
    """Exec the lean form with ``record`` (from the main thread, once every other thread has stopped)."""
    _exec(sys.executable, [sys.executable, "-I", "-S", os.path.abspath(__file__)], record)


def wake(record: dict[str, Any], reason: str) -> NoReturn:
    """Exec the daemon's own command line again, to adopt the node and do the work ``reason`` names."""
    record["reason"] = reason
    _exec(record["executable"], record["argv"], record)


def _exec(executable: str, argv: list[str], record: dict[str, Any]) -> NoReturn:
    signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os.execve(executable, argv, {**os.environ, ENV: json.dumps(record)})


def signature(path: str) -> list[int] | None:
    """What the daemon's watch loop compares (``node.daemon._signature``)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_ino, st.st_mtime_ns, st.st_size]


class Rest:
    """The lean form's state: the record, the tails of the services' logs, the self-pipe."""

    def __init__(self, record: dict[str, Any]) -> None:
        self.record = record
        self.watched: list[str] = [str(path) for path in record["watched"]]
        self.seen: list[list[int] | None] = list(record["seen"])
        self.poll_s = float(record["poll_s"])
        self.supervisord: int | None = record["supervisord"]
        self.tails = {str(source): Tail(os.path.join(record["log_dir"], f"{source}.log"), int(fd))
                      for source, fd in record["logs"].items()}
        self.node_log = str(record["node_log"])
        self.pipe_r, pipe_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(pipe_w, warn_on_full_buffer=False)
        for sig in SIGNALS:
            signal.signal(sig, _ignore)

    def run(self) -> NoReturn:
        poller = select.poll()
        poller.register(self.pipe_r, select.POLLIN)
        ctl = self.record["ctl_fd"]
        if ctl is not None:
            poller.register(ctl, select.POLLIN)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)  # the pending ones arrive now, in the pipe
        if self.record.get("stop"):
            self.wake(f"stopping ({signal.Signals(self.record['stop']).name})")
        next_poll = time.monotonic() + self.poll_s
        while True:
            events = dict(poller.poll(max(0.0, next_poll - time.monotonic()) * 1000))
            if self.pipe_r in events:
                self.signals()
            if ctl is not None and ctl in events:
                self.wake("a ctl client")
            if time.monotonic() >= next_poll:
                self.check()
                next_poll = time.monotonic() + self.poll_s

    def signals(self) -> None:
        try:
            got = set(os.read(self.pipe_r, 512))
        except BlockingIOError:
            return
        for sig in STOP_SIGNALS:
            if sig in got:
                self.record["stop"] = int(sig)
                self.wake(f"stopping ({signal.Signals(sig).name})")
        if signal.SIGCHLD in got:
            self.reap()

    def reap(self) -> None:
        if self.supervisord is None:
            return
        try:
            pid, status = os.waitpid(self.supervisord, os.WNOHANG)
        except ChildProcessError:
            pid, status = self.supervisord, -1
        if pid:
            self.supervisord = self.record["supervisord"] = None
            self.wake(f"supervisord exited (wait status {status})")

    def check(self) -> None:
        self.reap()
        self.forward()
        if len(self.watched) != len(self.seen):
            self.wake("the watched files are not the ones seen")
        for path, before in zip(self.watched, self.seen, strict=True):
            if signature(path) != before:
                self.wake(f"{path} changed")
        size = signature(self.node_log)
        if size is not None and size[2] > int(self.record["node_log_max"]):
            self.wake("the node log is due for rotation")

    def forward(self) -> None:
        """The services' new lines, prefixed, to the node log (and stdout), as ``LogStream`` does awake."""
        log_dir = self.record["log_dir"]
        try:
            names = sorted(os.listdir(log_dir))
        except OSError:
            names = []
        for name in names:
            source, ext = os.path.splitext(name)
            if ext == ".log" and os.path.join(log_dir, name) != self.node_log and source not in self.tails:
                self.tails[source] = Tail(os.path.join(log_dir, name))
        text = ""
        for source, tail in sorted(self.tails.items()):
            try:
                lines = tail.read_lines()
            except OSError:
                continue
            if lines:
                text += prefixed(source, "\n".join(lines))
        if not text:
            return
        with open(self.node_log, "a", encoding="utf-8") as out:
            out.write(text)
        if self.record["echo"]:
            with contextlib.suppress(OSError, ValueError):
                sys.stdout.write(text)
                sys.stdout.flush()

    def wake(self, reason: str) -> NoReturn:
        self.record["logs"] = {source: fd for source, tail in self.tails.items()
                               if (fd := tail.detach()) is not None}
        wake(self.record, reason)


def _ignore(_signum: int, _frame: object) -> None:
    """The signal's byte in the self-pipe is what counts."""


def main() -> None:
    try:
        record = take()
        if record is None:
            raise ValueError(f"no ${ENV}")
    except ValueError as exc:  # not started by a daemon: nothing to go back to
        raise SystemExit(f"mokka-node (at rest): {exc}") from None
    try:
        Rest(record).run()
    except Exception as exc:  # never a crash at rest: the daemon does the work it cannot make sense of
        record["logs"] = _still_open(record.get("logs"))
        wake(record, f"at rest: {type(exc).__name__}: {exc}")


def _still_open(logs: object) -> dict[str, int]:
    """The handed-over log files that are still open, inheritable again (what a failed start left)."""
    kept = {}
    for source, fd in logs.items() if isinstance(logs, dict) else ():
        with contextlib.suppress(OSError, TypeError):
            os.set_inheritable(fd, True)
            kept[source] = fd
    return kept


if __name__ == "__main__":
    main()
