"""The fake ``nv-fabricmanager``: foreground, readiness marker, clean shutdown.

The real daemon trains the NVSwitch fabric, after which the driver reports the GPUs'
fabric state "Completed".  Here "trained" is a marker file under the root that the
daemon writes after an optional init delay, re-asserts every few seconds (so deleting
it by hand heals), and removes on SIGTERM/SIGINT.  Failed, it runs but never gets
there, as a fabric manager stuck in training does.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from mokka_core.node.foreground import foreground, print_version
from mokka_core.stage.paths import find_root
from mokka_core.stage.store import NodeStore, atomic_write

REASSERT_SECONDS = 2.0
INIT_DELAY_ENV = "MOKKA_FABRICMANAGER_INIT_DELAY_SEC"
PROGRAM = "nv-fabricmanager"
#: what the real ``--version`` prints, ``{driver}`` the driver version (see the package README)
VERSION_TEXT = "Fabric Manager version is : {driver}"


def marker_path(root: Path) -> Path:
    return NodeStore(root).fabricmanager_ready


def write_marker(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, f"{os.getpid()}\n")


def run(root: Path, init_delay: float, failed: bool, stop: threading.Event,
        log: Callable[[str], None] = print, ready: threading.Event | None = None) -> None:
    """Serve until ``stop`` is set; the marker exists exactly while the fabric is 'trained' (and ``ready`` set)."""
    marker = marker_path(root)
    marker.unlink(missing_ok=True)  # a marker left by a killed daemon says nothing about this one
    mode = ", failed: fabric never trains" if failed else ""
    log(f"{PROGRAM}: starting (root {root}, init delay {init_delay:g}s{mode})")
    if stop.wait(init_delay):
        log(f"{PROGRAM}: clean shutdown")
        return
    if failed:
        log(f"{PROGRAM}: fabric training in progress")
    else:
        log(f"{PROGRAM}: fabric trained; ready ({marker})")
    try:
        while True:
            if not failed and not marker.exists():
                write_marker(marker)
            if not failed and ready is not None:
                ready.set()
            if stop.wait(REASSERT_SECONDS):
                break
    finally:
        marker.unlink(missing_ok=True)
    log(f"{PROGRAM}: clean shutdown")


def parse_delay(text: str, source: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SystemExit(f"{PROGRAM}: {source} must be a number of seconds, got {text!r}") from None
    if value < 0:
        raise SystemExit(f"{PROGRAM}: {source} must not be negative, got {text!r}")
    return value


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=PROGRAM, description="Fake NVIDIA fabric manager of a simulated node.")
    parser.add_argument("-c", "--config", help="fabric manager config file (accepted and ignored)")
    parser.add_argument("--root", type=Path, default=None, help="staged root (default: $MOKKA_ROOT, else /)")
    parser.add_argument("--init-delay", default=None, help=f"seconds before ready (${INIT_DELAY_ENV}, default 0)")
    parser.add_argument("--failed", action="store_true", help="never become ready (fabric stuck in training)")
    parser.add_argument("-v", "--version", action="store_true",
                        help="print the version (the node's driver version, as the real one's matches its driver)")
    args = parser.parse_args(argv)
    if args.version:
        print_version(PROGRAM, VERSION_TEXT, args.root)
    if args.init_delay is not None:
        delay = parse_delay(args.init_delay, "--init-delay")
    else:
        delay = parse_delay(os.environ.get(INIT_DELAY_ENV) or "0", INIT_DELAY_ENV)
    root = find_root(args.root)
    sys.exit(foreground(PROGRAM, lambda stop, ready: run(root, delay, args.failed, stop,
                                                          log=lambda line: print(line, flush=True), ready=ready)))


if __name__ == "__main__":
    main()
