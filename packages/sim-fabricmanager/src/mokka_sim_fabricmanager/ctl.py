"""The fake ``nv-fabricmanager-ctl``: ``-q`` prints READY (exit 0) once the fabric manager is ready."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from mokka_core.stage.paths import find_root
from mokka_core.stage.store import NodeStore

PROGRAM = "nv-fabricmanager-ctl"


def is_ready(root: Path) -> bool:
    """The marker exists and, when it names a process, that process is alive (a killed daemon is not ready)."""
    try:
        text = NodeStore(root).fabricmanager_ready.read_text().strip()
    except FileNotFoundError:
        return False
    if not text.isdigit():
        return True
    try:
        os.kill(int(text), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=PROGRAM, description="Query the fake fabric manager of a simulated node.")
    parser.add_argument("-q", "--query", action="store_true", help="print READY and exit 0 when the fabric is ready")
    parser.add_argument("--root", type=Path, default=None, help="staged root (default: $MOKKA_ROOT, else /)")
    args = parser.parse_args(argv)
    if not args.query:
        parser.print_usage(sys.stderr)
        sys.exit(2)
    if is_ready(find_root(args.root)):
        print("READY")
        sys.exit(0)
    print("fabric manager not ready", file=sys.stderr)
    sys.exit(1)


if __name__ == "__main__":
    main()
