"""The node's one log stream: the daemon's records and every line of supervisord and the services, prefixed.

supervisord and each service write a file of their own in the node's log dir (supervisord
rotates them).  A :class:`LogStream` forwards every new complete line there as ``[source] line``
to the node log, which ``mokka node logs`` reads, and to an echo (``mokka node up``: stdout).
Only the daemon writes to its stdout, so a file, a pipe, a tty and /dev/null all get whole lines.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

from ..stage.store import NodeStore, atomic_write
from .tail import Tail, prefixed
from .watch import observe

log = logging.getLogger(__name__)

DAEMON_SOURCE = "mokka-node"
#: the node log is rotated at this size, keeping one older file (``node.log.1``)
NODE_LOG_MAX_BYTES = 8 << 20


def daemon_logging(logger: str = "mokka_core", level: int = logging.INFO) -> None:
    """For a daemon process: ``logger``'s records go to the log stream alone (:meth:`LogStream.daemon_records`)."""
    core = logging.getLogger(logger)
    core.handlers = []
    core.setLevel(level)
    core.propagate = False


def source_of(line: str) -> str | None:
    """The source a node-log line is prefixed with (``[nv-fabricmanager] ...``), None if it has none."""
    if not line.startswith("["):
        return None
    end = line.find("] ")
    return line[1:end] if end > 1 else None


class LogStream:
    """Lines prefixed with their source, to the node log and the echo; forwards the services' files."""

    def __init__(self, root: Path, echo: TextIO | None = None) -> None:
        self.store = NodeStore(root)
        self.echo = echo
        self._lock = threading.Lock()
        self._file: TextIO | None = None
        self._tails: dict[str, Tail] = {}
        self._observer: Any = None

    def open(self, tails: Mapping[str, int] | None = None) -> None:
        """Start the node log (appended to: a restarted daemon keeps its predecessor's lines) and forwarding.

        ``tails``: the services' log files as :meth:`suspend` handed them over, forwarded from there on."""
        self.store.log_dir.mkdir(parents=True, exist_ok=True)
        self._file = open(self.store.node_log, "a", encoding="utf-8")  # noqa: SIM115 - open until close()
        for source, fd in (tails or {}).items():
            try:
                self._tails[source] = Tail(self.store.service_log(source), fd)
            except OSError as exc:  # read again from its start
                log.warning("the log of %s handed over (fd %d) cannot be read on: %s", source, fd, exc)
        if self._file.tell() > NODE_LOG_MAX_BYTES:  # grown while the daemon rested
            self._rotate()
        own = self.store.node_log.name  # the node log's own writes (and its rotation) wake nothing
        self._observer = observe([str(self.store.log_dir)],
                                 lambda path: None if os.path.basename(path).startswith(own) else self._drain())

    def write(self, source: str, text: str) -> None:
        lines = prefixed(source, text)
        with self._lock:
            if self._file is not None:
                try:
                    self._file.write(lines)
                    self._file.flush()
                    if self._file.tell() > NODE_LOG_MAX_BYTES:
                        self._rotate()
                except OSError:  # a full disk or a root gone read-only: the echo still has every line
                    self._close_file()
            if self.echo is not None:
                with contextlib.suppress(OSError, ValueError):  # a closed pipe or stdout
                    self.echo.write(lines)
                    self.echo.flush()

    def close(self) -> None:
        """Forward what the services wrote last and close the node log; later lines go to the echo only.

        Called once the services are stopped and before teardown removes the log dir."""
        self._stop_observer()
        self._drain(final=True)
        for tail in self._tails.values():
            tail.close()
        self._tails.clear()
        with self._lock:
            self._close_file()

    def suspend(self) -> dict[str, int]:
        """Stop forwarding and close the node log; each service's log file, open (inheritable) at the first
        line not forwarded yet, for whoever forwards from here (the daemon's lean form at rest, then the
        daemon again: :meth:`open`), so that no line is lost or forwarded twice."""
        self._stop_observer()
        self._drain()
        handed = {source: fd for source, tail in self._tails.items() if (fd := tail.detach()) is not None}
        self._tails.clear()
        with self._lock:
            self._close_file()
        return handed

    @contextlib.contextmanager
    def daemon_records(self, logger: str = "mokka_core") -> Iterator[None]:
        """While inside, ``logger``'s records (at the level it has) are lines of source ``mokka-node``."""
        handler = _Handler(self)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logging.getLogger(logger).addHandler(handler)
        try:
            yield
        finally:
            logging.getLogger(logger).removeHandler(handler)

    def _stop_observer(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=2)
            self._observer = None

    def _drain(self, final: bool = False) -> None:
        with contextlib.suppress(OSError):
            for path in sorted(self.store.log_dir.glob("*.log")):
                if path != self.store.node_log and path.stem not in self._tails:
                    self._tails[path.stem] = Tail(path)
        for source, tail in self._tails.items():
            try:
                lines = tail.read_lines(final)
            except OSError:  # unreadable this time (a file gone bad): the next write tries again
                continue
            if lines:
                self.write(source, "\n".join(lines))

    def _rotate(self) -> None:
        """Copy, then truncate (as logrotate's copytruncate): a follower sees the file shrink, and reads on."""
        assert self._file is not None
        atomic_write(Path(f"{self.store.node_log}.1"), self.store.node_log.read_bytes())
        self._file.truncate(0)

    def _close_file(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None


class _Handler(logging.Handler):
    def __init__(self, stream: LogStream) -> None:
        super().__init__()
        self.stream = stream

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.stream.write(DAEMON_SOURCE, self.format(record))
        except Exception:
            self.handleError(record)


def sources(root: Path) -> list[str]:
    """The sources of the node's log: the daemon, supervisord and every service that has a log file."""
    store = NodeStore(root)
    found = {DAEMON_SOURCE}
    with contextlib.suppress(OSError):
        found |= {path.stem for path in store.log_dir.glob("*.log") if path != store.node_log}
    return sorted(found)


def read_node_log(root: Path, source: str | None = None, follow: bool = False,
                  poll_s: float = 0.2) -> Iterator[str]:
    """The node log's lines (all, or one source's), oldest first; ``follow``: then every new one, until the
    node log goes (the node was torn down).  Raises FileNotFoundError where there is no node log."""
    path = NodeStore(root).node_log
    rotated = Path(f"{path}.1")
    tail = Tail(path)
    with contextlib.suppress(OSError), open(rotated, encoding="utf-8", errors="replace") as older:
        yield from _only(source, (line.rstrip("\n") for line in older))
    if not path.exists():
        raise FileNotFoundError(path)
    try:
        while True:
            yield from _only(source, tail.read_lines(final=not follow))
            if not follow or tail.file is None:
                return
            time.sleep(poll_s)
    finally:
        tail.close()


def _only(source: str | None, lines: Iterator[str] | list[str]) -> Iterator[str]:
    return (line for line in lines if source is None or source_of(line) == source)
