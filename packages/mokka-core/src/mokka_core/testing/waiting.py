"""Waiting in tests for what another process or thread does: one helper, one meaning of its timeout."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(condition: Callable[[], object], timeout: float = 30.0, what: str = "condition") -> None:
    """Poll ``condition`` every 20 ms until it is true; an AssertionError naming ``what`` after ``timeout`` s.

    The timeout is a ceiling for a loaded 2-core CI machine, never a speed target: how fast a change
    arrives is measured by the benchmarks (``tox -e bench``).
    """
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout} s")
        time.sleep(0.02)
