"""The node daemon's one way of waking on file changes: a watchdog (inotify) observer, no polling."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from typing import Any


def observe(directories: Iterable[str], on_change: Callable[[str], None]) -> Any:
    """A started daemon-thread observer that calls ``on_change(path)`` in its one thread for every event in
    ``directories`` (not below them; missing ones are skipped) but an open or a close without a write."""
    from watchdog.events import FileSystemEvent, FileSystemEventHandler
    from watchdog.observers import Observer

    class Handler(FileSystemEventHandler):
        def on_any_event(self, event: FileSystemEvent) -> None:
            if event.event_type not in ("opened", "closed_no_write"):
                on_change(str(event.src_path))

    logging.getLogger("watchdog.observers.inotify").addFilter(_stopped_emitter_race)
    observer = Observer()
    handler = Handler()
    for directory in sorted(set(directories)):
        if os.path.isdir(directory):
            observer.schedule(handler, directory, recursive=False)
    observer.daemon = True
    observer.start()
    return observer


def _stopped_emitter_race(record: logging.LogRecord) -> bool:
    """Drop watchdog's "queue_events() called when the thread is inactive": its emitter logs it at ERROR
    when a blocking read returns after ``stop()`` (a shutdown while files change); nothing is lost."""
    return not str(record.msg).startswith("InotifyEmitter.queue_events() called when the thread is inactive")
