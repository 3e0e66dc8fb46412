"""The node's kernel log written to the host's too (``mokka node up --host-kmsg``): each record once, in order.

The kernel takes one record per write(2) to /dev/kmsg, ``<level>text``
(Documentation/ABI/testing/dev-kmsg); it keeps the level and files the record under
facility user, as every record written from user space.  The last record written is kept
in the node's state (:attr:`~mokka_core.stage.store.NodeStore.kernel_log_forwarded`), so a
restarted service or daemon goes on after it; teardown removes it with the node's log.
A target that cannot be written is said once; its records wait for it, the node's own log
keeps them meanwhile.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from mokka_core.stage.store import KERNEL_LOG, NodeStore, atomic_write

from .kernel_log import LOADING_RECORDS, LogFile

PROGRAM = "mokka-kmsg"
POLL_SECONDS = 1.0  # a stat a second: an idle node stays cheap, a log watcher sees an Xid within a second
# never created (the host has it or not); appended to, should it be a plain file
TARGET_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def host_record(record: bytes) -> bytes:
    """A record of the node's log, ``pri,seq,usec,flags;text``, as it is written to /dev/kmsg: ``<pri>text``."""
    fields, _, text = record.partition(b";")
    return b"<" + fields.split(b",", 1)[0] + b">" + text


def _usec(record: bytes) -> int:
    return int(record.split(b",", 3)[2])


def pending(records: list[bytes], last: bytes | None) -> list[bytes]:
    """The records after ``last``, the last one written: found at its place, else those stamped later
    (the log was cut and numbered anew: ``nvml-mock-ctl reset``).  Never the driver's loading lines:
    the host's log has its own boot."""
    if last is None:
        return records[LOADING_RECORDS:]
    seq = int(last.split(b",", 2)[1])
    if 0 < seq <= len(records) and records[seq - 1] == last:
        return records[seq:]
    return [record for record in records if _usec(record) > _usec(last)]


class Forwarder:
    def __init__(self, root: Path, target: str) -> None:
        self.log = LogFile(root / KERNEL_LOG)
        self.state = NodeStore(root).kernel_log_forwarded
        self.target = target
        self.own_log = root / KERNEL_LOG
        self._problem: str | None = None  # the last one said
        self._target_blocked = False
        self.last: bytes | None = None
        try:
            self.last = self.state.read_bytes() or None
        except FileNotFoundError:
            pass
        except OSError as exc:
            self._say(f"cannot read the last record written from {self.state} ({exc.strerror or exc}); "
                      "writing the node's whole log")

    def start(self) -> None:
        """Say at start where the records go, or why they cannot."""
        try:
            os.close(os.open(self.target, TARGET_FLAGS))
        except OSError as exc:
            self._blocked(exc)
        else:
            print(f"{PROGRAM}: writing the node's kernel log to the host's kernel log {self.target} too", flush=True)

    def step(self) -> None:
        """Write what the node logged since the last record written, stopping at the first that cannot be."""
        for record in pending(self.log.records(), self.last):
            try:
                fd = os.open(self.target, TARGET_FLAGS)  # a fresh open per record: the kernel rate-limits
                try:                                     # each open file to 10 records in 5 s and drops the rest
                    os.write(fd, host_record(record))
                finally:
                    os.close(fd)
            except OSError as exc:
                self._blocked(exc)
                return
            if self._target_blocked:
                print(f"{PROGRAM}: {self.target} takes records again", flush=True)
                self._target_blocked, self._problem = False, None
            self.last = record  # kept here too: a state that cannot be saved must not repeat the record
            try:
                atomic_write(self.state, record)
            except OSError as exc:
                self._say(f"cannot keep the last record written in {self.state} ({exc.strerror or exc}); "
                          "a restart may write it again")

    def serve(self, stop: threading.Event) -> None:
        while not stop.wait(POLL_SECONDS):
            try:
                self.step()
            except Exception as exc:  # a record this code cannot read must not end the forwarding unsaid
                self._say(f"forwarding failed: {type(exc).__name__}: {exc}")

    def _blocked(self, exc: OSError) -> None:
        self._target_blocked = True
        self._say(f"cannot write the host's kernel log {self.target} ({exc.strerror or exc}); the node's records "
                  f"stay in its own log {self.own_log} and are written once it can be")

    def _say(self, problem: str) -> None:
        """Say a problem once, not at every poll while it lasts."""
        if problem != self._problem:
            print(f"{PROGRAM}: {problem}", flush=True)
            self._problem = problem
