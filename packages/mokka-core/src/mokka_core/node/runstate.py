"""The daemon's bookkeeping file: who runs the node, in which phase, and what to remove at the end.

The run-state file (:attr:`~mokka_core.stage.store.NodeStore.daemon_file`) is written by ``run()`` and read
by ``mokka node status`` and ``mokka node down``.  It identifies the daemon by pid
*and* process start time, so a recycled pid is never signalled by mistake.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..stage.store import NodeStore, atomic_write

STAGING, READY, RELOADING, STOPPING, FAILED = "staging", "ready", "reloading", "stopping", "failed"


@dataclass
class RunState:
    pid: int
    start_ticks: int | None
    phase: str = STAGING
    created_dirs: list[str] = field(default_factory=list)  # relative to root, outermost first
    preexisting: list[str] = field(default_factory=list)  # state files that were there before `up`
    services: dict[str, str] = field(default_factory=dict)  # supervisord program -> surface
    service_files: list[str] = field(default_factory=list)  # the services' ready markers, relative to root
    cdi_link: str | None = None  # the CDI spec link outside the root (``--cdi-spec-dir``), absolute
    error: str | None = None
    #: the daemon rests in its lean form (``node.rest``); the node is as ready as its phase says
    resting: bool = False

    def save(self, root: Path) -> None:
        path = NodeStore(root).daemon_file
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, root: Path) -> RunState | None:
        try:
            data = json.loads(NodeStore(root).daemon_file.read_text())
            return cls(**data)
        except (OSError, ValueError, TypeError):
            return None

    def daemon_alive(self) -> bool:
        """True while the process that wrote this file is still running."""
        ticks = process_start_ticks(self.pid)
        return ticks is not None and ticks == self.start_ticks


def process_start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat: start time in clock ticks since boot (None if gone or a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else int(fields[19])
