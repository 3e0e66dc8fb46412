"""Remove every trace of a node under a root: services, staged surfaces, bookkeeping, created dirs.

Works the same whether the daemon is stopping itself, or ``mokka node down`` cleans
up after a daemon that was SIGKILLed (then only the files on disk are left to go by).
Every step is idempotent, so an interrupted teardown can simply be run again.
"""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path

from ..stage import staging
from ..stage.store import NodeStore
from .runstate import RunState
from .supervise import Supervisor, socket_path

log = logging.getLogger(__name__)


def teardown_node(root: Path, deadline: float, supervisor: Supervisor | None = None,
                  run_state: RunState | None = None) -> list[str]:
    """Tear the node down by ``deadline`` (monotonic); returns the surfaces removed."""
    run_state = run_state or RunState.load(root)
    (supervisor or Supervisor(root)).stop(deadline)
    removed = []
    try:
        removed = staging.teardown_all(root)
    except Exception as exc:
        log.error("teardown of the staged surfaces failed: %s", exc)
        for name in staging.staged_surfaces(root):  # one by one: what can go, goes
            try:
                staging.teardown(root, name)
                removed.append(name)
            except Exception as each:
                log.error("teardown of surface %s failed: %s", name, each)
    store = NodeStore(root)
    keep = {root / rel for rel in run_state.preexisting} if run_state else {store.override_file}
    for path in store.bookkeeping:
        if path not in keep:
            path.unlink(missing_ok=True)
    socket_path(root).unlink(missing_ok=True)
    for rel in reversed(run_state.created_dirs if run_state else []):
        with contextlib.suppress(OSError):  # not empty: something not ours lives there
            (root / rel).rmdir()
    if time.monotonic() > deadline:
        log.warning("teardown overran its deadline")
    return removed
