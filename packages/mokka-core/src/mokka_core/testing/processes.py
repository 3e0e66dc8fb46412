"""The processes under a daemon, for tests and benchmarks that look at a node's services."""

from __future__ import annotations

import os
from pathlib import Path


def descendants(pid: int) -> list[int]:
    """Every process under ``pid`` (not ``pid`` itself), from the parent ids in /proc/<pid>/stat."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], list(children.get(pid, []))
    while todo:
        current = todo.pop()
        found.append(current)
        todo += children.get(current, [])
    return found
