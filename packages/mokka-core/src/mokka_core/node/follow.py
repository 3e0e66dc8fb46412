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
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

from ..model.inputs import fingerprint
from ..stage.paths import NVML_SETTINGS_FILE

SERVICE = "mokka-mig-follow"
#: a safety net beside the watcher's events
POLL_S = 1.0
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def follow(root: Path, stop: threading.Event, wake: threading.Event | None = None,
           during_pass: Callable[[], AbstractContextManager[object]] = nullcontext) -> None:
    """Re-stage on every change of the setter record until ``stop``; ``wake`` (set by the record's watcher,
    and by whoever sets ``stop``) ends a wait between passes; ``during_pass`` is entered around each pass."""
    from .watch import observe

    record = root / NVML_SETTINGS_FILE
    wake = wake if wake is not None else threading.Event()
    observer = observe([str(record.parent)], lambda _path: wake.set())
    restage_now = None  # the re-staging machinery, loaded at the first change: most runs never partition a GPU
    # never seen: the first pass re-stages what is there.  No record yet: the node was staged without one
    # and nothing has partitioned a GPU, so the first pass waits for one to appear
    last: list[int] | bool | None = None if fingerprint(record) is None else False
    try:
        while not stop.is_set():
            now = fingerprint(record)
            if now != last:
                last = now
                with during_pass():
                    restage_now = restage_now or _restager(root)
                    if not restage_now(stop):
                        return
            wake.wait(POLL_S)
            wake.clear()
    finally:
        observer.stop()
        observer.join(timeout=2)


def _restager(root: Path) -> Callable[[threading.Event], bool]:
    """A pass that re-stages ``root`` from its record; it returns False once stopping interrupted it."""
    from ..stage.render import Interrupted, installed_surfaces
    from ..stage.restage import restage
    from ..stage.store import NodeStore

    surfaces = installed_surfaces(root=root)

    def restage_now(stop: threading.Event) -> bool:
        try:
            with NodeStore(root).lock():
                restage(root, surfaces, stop)
        except Interrupted:  # stopping: what was staged stays as it was
            return False
        except Exception as exc:  # the node stays as it was, as under the daemon
            print(f"{SERVICE}: setter record change not followed: {type(exc).__name__}: {exc}",
                  file=sys.stderr, flush=True)
        return True

    return restage_now


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

    @contextmanager
    def stop_after_the_pass() -> Iterator[None]:
        # between passes SIGTERM/SIGINT end the process at once (there is nothing to finish, and mokka run's
        # stop need not wait for an interpreter that is still importing); during one they let it end cleanly
        for sig in STOP_SIGNALS:
            signal.signal(sig, stop_on_signal)
        try:
            yield
        finally:
            for sig in STOP_SIGNALS:
                signal.signal(sig, signal.SIG_DFL)

    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    follow(args.root.absolute(), stop, wake, stop_after_the_pass)


if __name__ == "__main__":
    main()
