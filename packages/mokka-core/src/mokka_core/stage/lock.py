"""The node lock: one ``flock`` on ``paths.LOCK_FILE`` serialises every writer of a root's rendered state.

The ctl holds it across read-modify-write of the override file and the re-render
that follows; the daemon holds it while it re-renders.  ``flock`` locks belong to
an open file description, so two threads of one process exclude each other too.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .paths import LOCK_FILE


@contextmanager
def node_lock(root: Path) -> Iterator[None]:
    path = root / LOCK_FILE
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the last descriptor releases the lock
