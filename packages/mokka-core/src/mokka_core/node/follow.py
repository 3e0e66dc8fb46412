"""``python -m mokka_core.node.follow --root ROOT``: re-stage what follows the NVML setter record, until SIGTERM.

``mokka run`` starts it as a service beside CMD for a node with a MIG-capable GPU, so a partition
nvidia-smi makes or destroys inside CMD shows in the capability files, device nodes and CDI spec
(``mokka node up``'s daemon follows the record itself, in its watch loop).  CMD does not wait for it
(start-up stays as fast): its first pass re-stages whatever the record holds by then, so a change made
while it starts is followed all the same, a fraction of a second later (no record by then: nothing to follow
yet).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from ..model.inputs import fingerprint
from ..stage.paths import NVML_SETTINGS_FILE

SERVICE = "mokka-mig-follow"
#: a safety net beside the watcher's events
POLL_S = 1.0


def follow(root: Path, stop: threading.Event, wake: threading.Event | None = None) -> None:
    """Re-stage on every change of the setter record until ``stop``; ``wake`` (set by the record's watcher,
    and by whoever sets ``stop``) ends a wait between passes."""
    from ..stage.render import Interrupted, installed_surfaces
    from ..stage.restage import restage
    from ..stage.store import NodeStore
    from .watch import observe

    record = root / NVML_SETTINGS_FILE
    wake = wake if wake is not None else threading.Event()
    observer = observe([str(record.parent)], lambda _path: wake.set())
    surfaces = installed_surfaces(root=root)
    # never seen: the first pass re-stages what is there.  No record yet: the node was staged without one
    # and nothing has partitioned a GPU, so the first pass waits for one to appear
    last: list[int] | bool | None = None if fingerprint(record) is None else False
    try:
        while not stop.is_set():
            now = fingerprint(record)
            if now != last:
                last = now
                try:
                    with NodeStore(root).lock():
                        restage(root, surfaces, stop)
                except Interrupted:  # stopping: what was staged stays as it was
                    return
                except Exception as exc:  # the node stays as it was, as under the daemon
                    print(f"{SERVICE}: setter record change not followed: {type(exc).__name__}: {exc}",
                          file=sys.stderr, flush=True)
            wake.wait(POLL_S)
            wake.clear()
    finally:
        observer.stop()
        observer.join(timeout=2)


def main(argv: list[str] | None = None) -> None:
    from ..version import __version__

    parser = argparse.ArgumentParser(prog=SERVICE, description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"{SERVICE} {__version__}")
    parser.add_argument("--root", type=Path, default=Path(os.environ.get("MOKKA_ROOT", "/")),
                        help="node root whose setter record to follow (default: $MOKKA_ROOT, else /)")
    args = parser.parse_args(argv)
    stop, wake = threading.Event(), threading.Event()

    def stop_on_signal(*_: Any) -> None:
        stop.set()
        wake.set()  # not a poll interval later

    signal.signal(signal.SIGTERM, stop_on_signal)
    signal.signal(signal.SIGINT, stop_on_signal)
    follow(args.root.absolute(), stop, wake)


if __name__ == "__main__":
    main()
