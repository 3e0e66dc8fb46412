"""The MAD responder as a long-lived service, in the foreground (SIGTERM stops it).

``python -m mokka_sim_ib.responder_service --root R`` is what the surface's service runs: it loads
no CLI, no profile schema, no node model, no asyncio and no logging (a node at rest runs one per
node, so its size counts); ``mokka-sim-ib respond`` is the same for a person.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from mokka_core.errors import MokkaError
from mokka_core.node.foreground import foreground
from mokka_core.stage.paths import find_root

from . import config, responder
from .responder import PROGRAM

if TYPE_CHECKING:
    import threading

DEFAULT_FABRIC_DIR = "/run/mokka/ib-fabric"


def serve(root: Path, listen: str, fabric_dir: Path, peers: list[str]) -> int:
    """Serve the node staged under ``root`` until stopped; the exit status (2: a bad address)."""
    everyone = peers + [p for p in os.environ.get("MOKKA_IB_PEERS", "").split(",") if p]
    try:
        addresses = [responder.parse_address(p) for p in everyone]
        listen_at = responder.parse_address(listen)
    except ValueError as exc:
        print(f"{PROGRAM}: {exc}", file=sys.stderr)
        return 2

    def run(stop: threading.Event, ready: threading.Event) -> None:
        try:
            responder.run(root / config.NODE_CONFIG, root / config.SOCKET, listen_at, fabric_dir, addresses, stop,
                          ready)
        except FileNotFoundError as exc:
            raise MokkaError(f"{exc.filename}: not staged (run `mokka-sim-ib stage` first)") from None

    return foreground(PROGRAM, run, errors=(MokkaError, ValueError))


def _help_formatter(prog: str) -> argparse.HelpFormatter:
    # a fixed width: for the terminal's, argparse loads shutil, and shutil zlib, bz2 and lzma (over half a
    # megabyte that the service, one per node, would keep)
    return argparse.HelpFormatter(prog, width=100)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=PROGRAM, description="MAD responder of a simulated node's HCAs.",
                                     formatter_class=_help_formatter)
    parser.add_argument("--root", type=Path, default=None, help="staged root (default: $MOKKA_ROOT)")
    parser.add_argument("--listen", default=os.environ.get("MOKKA_IB_LISTEN", "127.0.0.1:0"))
    parser.add_argument("--fabric-dir", type=Path,
                        default=Path(os.environ.get("MOKKA_IB_FABRIC_DIR", DEFAULT_FABRIC_DIR)))
    parser.add_argument("--peer", action="append", default=[], help="HOST:PORT of another node's responder")
    args = parser.parse_args(argv)
    sys.exit(serve(find_root(args.root), args.listen, args.fabric_dir, args.peer))


if __name__ == "__main__":
    main()
