"""``nvml-mock-ctl``'s entry point: hand the command to the node daemon where one listens, else run it here.

A running node daemon has the node code loaded; importing it takes a fresh interpreter
longer than the change itself.  So the command's words go to the daemon's socket
(``<root>/var/lib/mokka/ctl.sock``), the daemon runs them through the same
:func:`mokka_core.ctl.cli.execute` against its own root, and this process prints what
that printed and exits with its status.  Where no daemon answers (none runs, a dead one
left its socket, the socket belongs to another user, the path is too long for a socket)
the command runs in this process as it always did.  Nothing here imports more than the
interpreter has loaded already: ``_socket``, not ``socket``, whose enums of every
constant would cost more than the rest of the command.

Wire format (protocol 1): the request is ``mokka-ctl 1`` and the words, each followed by
a NUL; the client then shuts its side down.  The answer is ``STATUS OUTLEN ERRLEN\\n``
and that many bytes of standard output and of standard error; status -1 declines the
command (another user, another protocol), which then runs here.
"""

from __future__ import annotations

import os
import sys

from ..stage.layout import CTL_SOCKET
from . import COMPLETE_VAR, COMPLETION_OPTIONS

PROTOCOL = b"mokka-ctl 1"
#: how long the daemon may take to answer: waiting for the node lock included
ANSWER_TIMEOUT_S = 120.0
ANSWER_LIMIT = 64 << 20
#: set, these describe a run of this process (its report, its lock wait), so the command runs here
IN_PROCESS_ENV = ("MOKKA_CTL_IN_PROCESS", "MOKKA_CTL_VERBOSE", "MOKKA_LOCK_TIMEOUT_S")

TYPE_CHECKING = False
if TYPE_CHECKING:
    from _socket import socket
    from collections.abc import Sequence


def main() -> None:
    if COMPLETE_VAR in os.environ:  # the shell asks what completes the line (the function ctl.shell installs)
        from .completion import main as complete

        complete()
        return
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    status = relay(sys.argv[1:])
    if status is None:
        from .cli import main as run_here

        run_here()
    sys.exit(status)


def relay(words: Sequence[str]) -> int | None:
    """Run ``words`` in the node daemon and print what it printed: the exit status, or None where no
    daemon takes the command (the caller runs it itself)."""
    if any(os.environ.get(name) for name in IN_PROCESS_ENV) or any(map(_completion_option, words)):
        return None
    path = socket_path(words)
    if path is None or len(os.fsencode(path)) >= 108:  # sun_path's size on Linux
        return None
    import _socket

    conn = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    answer, why = None, "it closed the connection"
    try:
        try:
            conn.connect(path)
        except OSError:
            return None
        conn.sendall(b"\0".join([PROTOCOL, *(os.fsencode(word) for word in words)]) + b"\0")
        conn.shutdown(_socket.SHUT_WR)
        conn.settimeout(ANSWER_TIMEOUT_S)
        answer = _read_answer(conn)
    except OSError as exc:
        why = str(exc.strerror or exc)
    finally:
        conn.close()
    if answer is None:
        root = path[:-len(CTL_SOCKET) - 1] or "/"
        print(f"nvml-mock-ctl: the node daemon under {root} took the command but did not answer ({why}); "
              f"the change may or may not be applied: see `nvml-mock-ctl --root {root} status`", file=sys.stderr)
        return 1
    status, out, err = answer
    if status < 0:  # declined: not this daemon's user, or another protocol
        return None
    sys.stdout.buffer.write(out)
    sys.stdout.flush()
    sys.stderr.buffer.write(err)
    sys.stderr.flush()
    return status


def _read_answer(conn: socket) -> tuple[int, bytes, bytes] | None:
    chunks = []
    size = 0
    while True:
        chunk = conn.recv(1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        if size > ANSWER_LIMIT:
            return None
    data = b"".join(chunks)
    head, newline, body = data.partition(b"\n")
    try:
        status, out_len, err_len = (int(field) for field in head.split(b" "))
    except ValueError:
        return None
    if not newline or len(body) != out_len + err_len:
        return None
    return status, body[:out_len], body[out_len:]


def _completion_option(word: str) -> bool:
    """``word`` is --install-completion or --show-completion (any prefix argparse accepts): it acts on this
    user's shell, so it runs here, never in the daemon."""
    name = word.partition("=")[0]
    return len(name) >= 3 and any(option.startswith(name) for option in COMPLETION_OPTIONS)


def socket_path(words: Sequence[str]) -> str | None:
    """The daemon socket of the node ``words`` act on: --root (any prefix argparse accepts), else
    $MOKKA_ROOT; None where the root is found otherwise (the command then finds it itself)."""
    root = None
    iterator = iter(words)
    for word in iterator:
        if word == "--":
            break
        name, equals, value = word.partition("=")
        if len(name) >= 3 and "--root".startswith(name):
            root = value if equals else next(iterator, None)
            if root is None:
                return None
    if root is None:
        root = os.environ.get("MOKKA_ROOT") or None
    if root is None:
        return None
    return os.path.join(os.path.abspath(root), CTL_SOCKET)
