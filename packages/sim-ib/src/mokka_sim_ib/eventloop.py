"""A one-thread event loop on ``selectors``: readable sockets, timers, work handed back from threads, tasks.

The responder's loop without asyncio's import cost (each node at rest runs a responder).  It blocks in
``select`` until a socket is readable, the next timer is due or another thread hands work in: no tick.
A task is a generator that yields a :data:`Wait` (a function taking the callback its result goes to)
where asyncio code would ``await``; :func:`spawn` drives it.
"""

from __future__ import annotations

import contextlib
import heapq
import selectors
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Generator
from typing import Any, TypeVar

T = TypeVar("T")
#: what a task waits on: called with the callback that takes the result
Wait = Callable[[Callable[[Any], None]], None]
Task = Generator[Wait, Any, T]


def report_exception(what: str, exc: BaseException) -> None:
    """``exc`` with its traceback on stderr: a bug, and the loop goes on."""
    import traceback  # here: loaded only when something failed

    print(f"{what}:\n{''.join(traceback.format_exception(exc))}", file=sys.stderr, end="", flush=True)


class Timer:
    __slots__ = ("callback", "cancelled", "when")

    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True

    def __lt__(self, other: Timer) -> bool:
        return self.when < other.when


class Loop:
    def __init__(self) -> None:
        self._selector = selectors.DefaultSelector()
        self._timers: list[Timer] = []
        self._handed_in: deque[Callable[[], None]] = deque()
        self._wake, self._waker = socket.socketpair()
        self._wake.setblocking(False)
        self._waker.setblocking(False)
        self._selector.register(self._wake, selectors.EVENT_READ, self._run_handed_in)
        self._stopped = False

    def on_readable(self, sock: socket.socket, callback: Callable[[], None]) -> None:
        self._selector.register(sock, selectors.EVENT_READ, callback)

    def forget(self, sock: socket.socket) -> None:
        """No more callbacks for ``sock`` (call before closing it)."""
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(sock)

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        timer = Timer(time.monotonic() + delay, callback)
        heapq.heappush(self._timers, timer)
        return timer

    def call_soon(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` in the loop's thread, after what runs now (callable from any thread)."""
        self._handed_in.append(callback)
        with contextlib.suppress(OSError):  # full: a wake-up is pending already; closed: the loop has ended
            self._waker.send(b"\0")

    def in_thread(self, work: Callable[[], T], then: Callable[[T | None], None]) -> None:
        """``work()`` in a thread of its own (it may block), then ``then(result)`` in the loop (None if it raised)."""
        def run() -> None:
            result = None
            try:
                result = work()
            finally:
                self.call_soon(lambda: then(result))

        threading.Thread(target=run, daemon=True).start()

    def run_until(self, stop: threading.Event) -> None:
        """Serve callbacks until ``stop`` is set (by a signal handler or another thread)."""
        threading.Thread(target=self._stop_when_set, args=(stop,), daemon=True).start()
        while not self._stopped:
            for key, _ in self._selector.select(self._next_timeout()):
                self._call(key.data)
            self._run_due_timers()

    def close(self) -> None:
        self._selector.close()
        self._wake.close()
        self._waker.close()

    def _stop_when_set(self, stop: threading.Event) -> None:
        stop.wait()
        self.call_soon(self._stop)

    def _stop(self) -> None:
        self._stopped = True

    def _next_timeout(self) -> float | None:
        while self._timers and self._timers[0].cancelled:
            heapq.heappop(self._timers)
        return max(0.0, self._timers[0].when - time.monotonic()) if self._timers else None

    def _run_due_timers(self) -> None:
        now = time.monotonic()
        while self._timers and self._timers[0].when <= now:
            timer = heapq.heappop(self._timers)
            if not timer.cancelled:
                self._call(timer.callback)

    def _run_handed_in(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while self._wake.recv(4096):
                pass
        while self._handed_in:
            self._call(self._handed_in.popleft())

    @staticmethod
    def _call(callback: Callable[[], None]) -> None:
        try:
            callback()
        except Exception as exc:  # one request's bug must not take the node's responder down
            report_exception(f"{callback!r} failed", exc)


def spawn(task: Task[T], done: Callable[[T], None], failed: Callable[[Exception], None]) -> None:
    """Drive ``task``: each :data:`Wait` it yields is called with the callback that resumes it with the result;
    its return value goes to ``done``, an exception it raises to ``failed``."""
    def resume(value: Any) -> None:
        try:
            wait = task.send(value)
        except StopIteration as end:
            done(end.value)
            return
        except Exception as exc:
            failed(exc)
            return
        wait(resume)

    resume(None)
