"""The node daemon's ctl socket: run the nvml-mock-ctl commands clients hand over (``ctl.relay``).

The daemon has the node code loaded, so a command run here lands in the time the change
takes, not the time a fresh interpreter takes to import the node code.  The socket is
the node's (``<root>/var/lib/mokka/ctl.sock``, mode 0600); a client whose user is
neither the daemon's nor root is refused (its command then runs in its own process,
with its own permissions).  Commands run one at a time, in one thread; each is the
command line's own ``execute`` (given by the caller: the node layer does not import the
ctl), so parsing, verbs, messages and exit status are the same.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import socket
import struct
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from ..stage.store import NodeStore

log = logging.getLogger(__name__)

#: runs one command's words on the node under the root: (exit status, stdout text, stderr text)
Runner = Callable[[Sequence[str], Path], "tuple[int, str, str]"]

PROTOCOL = b"mokka-ctl 1"
DECLINED = b"-1 0 0\n"
REQUEST_LIMIT = 1 << 20
READ_TIMEOUT_S = 5.0


class CtlSocket:
    """Listen under ``root`` and run each client's command with ``runner`` until :meth:`close`."""

    def __init__(self, root: Path, runner: Runner) -> None:
        self.root = root
        self.runner = runner
        self.path = NodeStore(root).ctl_socket
        self._listener: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stop_r = self._stop_w = -1
        self._busy, self._last = False, time.monotonic()

    def start(self, fd: int | None = None) -> bool:
        """Listen; False (logged) where the socket cannot be made: clients then run commands themselves.

        ``fd``: the socket already listening (handed over by :meth:`detach`), with the clients waiting in it."""
        if fd is not None:
            try:
                os.set_inheritable(fd, False)
                return self._serve_in_thread(socket.socket(fileno=fd))
            except OSError as exc:  # not a socket any more: a new one (its waiting clients run their commands)
                log.warning("the ctl socket handed over (fd %d) is gone (%s): listening anew", fd, exc)
        self.path.unlink(missing_ok=True)  # a killed daemon's
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(str(self.path))
            os.chmod(self.path, 0o600)
            listener.listen(16)
        except OSError as exc:
            listener.close()
            self.path.unlink(missing_ok=True)
            log.info("no ctl socket (%s): nvml-mock-ctl runs each command in its own process", exc)
            return False
        return self._serve_in_thread(listener)

    def idle_since(self) -> float:
        """When (``time.monotonic``) the last command was answered; now while one runs."""
        return time.monotonic() if self._busy else self._last

    def detach(self) -> int | None:
        """Stop serving, and the listening socket as an inheritable descriptor (clients that connect meanwhile
        wait in it); None where there is none."""
        listener = self._stop_thread()
        if listener is None:
            return None
        fd = listener.detach()
        os.set_inheritable(fd, True)
        return fd

    def close(self) -> None:
        listener = self._stop_thread()
        if listener is None:
            return
        listener.close()
        with contextlib.suppress(OSError):  # a root gone read-only: teardown reports it as left (bookkeeping)
            self.path.unlink(missing_ok=True)

    def _serve_in_thread(self, listener: socket.socket) -> bool:
        listener.setblocking(False)  # accepted after select says a client waits; one gone meanwhile is skipped
        self._listener = listener
        self._stop_r, self._stop_w = os.pipe()
        self._thread = threading.Thread(target=self._serve, args=(listener, self._stop_r), name="ctl-socket",
                                        daemon=True)
        self._thread.start()
        return True

    def _stop_thread(self) -> socket.socket | None:
        listener, self._listener = self._listener, None
        if listener is None:
            return None
        os.write(self._stop_w, b"x")
        if self._thread is not None:
            self._thread.join(timeout=10)
        os.close(self._stop_r)
        os.close(self._stop_w)
        return listener

    def _serve(self, listener: socket.socket, stop: int) -> None:
        while True:
            ready, _, _ = select.select([listener.fileno(), stop], [], [])
            if stop in ready:
                return
            try:
                conn, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                return  # closed
            self._busy = True
            with conn:
                conn.setblocking(True)
                try:
                    self._answer(conn)
                except Exception as exc:  # one bad client must not stop the socket or the node
                    log.error("ctl socket: %s: %s", type(exc).__name__, exc)
            self._last, self._busy = time.monotonic(), False

    def _answer(self, conn: socket.socket) -> None:
        words = _read_request(conn) if _trusted(conn) else None
        if words is None:  # the client runs the command itself, with its own permissions and protocol
            conn.sendall(DECLINED)
            return
        status, out, err = self.runner(words, self.root)
        body_out, body_err = out.encode("utf-8", "surrogateescape"), err.encode("utf-8", "surrogateescape")
        conn.sendall(f"{status} {len(body_out)} {len(body_err)}\n".encode() + body_out + body_err)


def _trusted(conn: socket.socket) -> bool:
    """The client runs as the daemon's user or as root."""
    credentials = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _, uid, _ = struct.unpack("3i", credentials)
    return uid in (0, os.geteuid())


def _read_request(conn: socket.socket) -> list[str] | None:
    conn.settimeout(READ_TIMEOUT_S)
    chunks, size = [], 0
    while True:
        chunk = conn.recv(1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        if size > REQUEST_LIMIT:
            return None
    fields = b"".join(chunks).split(b"\0")
    if len(fields) < 2 or fields[0] != PROTOCOL or fields[-1] != b"":
        return None
    return [os.fsdecode(field) for field in fields[1:-1]]
