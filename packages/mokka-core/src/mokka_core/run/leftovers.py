"""Ending what CMD left running: everything it started is gone when it exits, as under
``unshare --fork --pid --kill-child``.

CMD's environment carries a token of this run (:data:`RUN_TOKEN`); every process it starts inherits it,
wherever it is reparented, and a process group or session of its own does not lose it. When CMD exits,
each process of ours that still carries the token is killed. A process that clears its environment
escapes, as it escapes a PID namespace by nothing; the node's services never carry it.
"""

from __future__ import annotations

import os
import signal
import time

RUN_TOKEN = "MOKKA_RUN_TOKEN"
#: how long the leftovers get to be gone after SIGKILL (they are, at once; a D-state process may take longer)
GONE_WAIT_S = 2.0


def new_token() -> str:
    return f"{os.getpid()}-{os.urandom(8).hex()}"


def end_leftovers(token: str) -> int:
    """SIGKILL every process (of this user) whose environment carries ``token``; how many there were."""
    marker = f"{RUN_TOKEN}={token}".encode()
    killed: set[int] = set()
    deadline = time.monotonic() + GONE_WAIT_S
    while time.monotonic() < deadline:
        found = _carrying(marker)
        if not found:
            break
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            killed.add(pid)
        time.sleep(0.01)  # a killed process loses its environment as it exits; a fork in flight shows next round
    return len(killed)


def _carrying(marker: bytes) -> list[int]:
    me = os.getpid()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                environ = f.read()
        except OSError:  # gone, or not ours to read
            continue
        if marker in environ.split(b"\0"):
            found.append(int(entry.name))
    return found
