"""The MAD responder as a service: ``python -m mokka_sim_ib.respond --root ROOT`` (what ``mokka run`` starts).

A lean entry point beside ``mokka-sim-ib respond`` (which calls :func:`serve_node` too): it
imports neither the command-line framework nor the profile schema, so the service is ready
in tens of milliseconds rather than hundreds.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from pathlib import Path

from mokka_core.errors import MokkaError

DEFAULT_FABRIC_DIR = "/run/mokka/ib-fabric"
RESPONDER = "sim-ib responder"


def serve_node(root: Path, listen: str, fabric_dir: Path, peers: list[str]) -> int:
    """Serve the node staged under ``root`` in the foreground until SIGTERM; the exit status."""
    from mokka_core.node.foreground import foreground, log_to_stdout

    from . import config, responder

    peers = peers + [p for p in os.environ.get("MOKKA_IB_PEERS", "").split(",") if p]
    log_to_stdout(RESPONDER, loggers=("mokka-sim-ib",))
    try:
        addresses = [responder.parse_address(p) for p in peers]
        listen_at = responder.parse_address(listen)
    except ValueError as exc:
        print(f"{RESPONDER}: {exc}", file=sys.stderr)
        return 2

    def serve(stop: threading.Event, ready: threading.Event) -> None:
        try:
            responder.run(root / config.NODE_CONFIG, root / config.SOCKET, listen_at, fabric_dir, addresses, stop,
                          ready)
        except FileNotFoundError as exc:
            raise MokkaError(f"{exc.filename}: not staged (run `mokka-sim-ib stage` first)") from None

    return foreground(RESPONDER, serve, errors=(MokkaError, ValueError))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m mokka_sim_ib.respond", description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True, help="the staged root")
    parser.add_argument("--listen", default="127.0.0.1:0", help="UDP address for MADs from peers")
    parser.add_argument("--fabric-dir", type=Path, default=Path(DEFAULT_FABRIC_DIR))
    parser.add_argument("--peer", action="append", default=[], help="another node's responder (HOST:PORT)")
    args = parser.parse_args(argv)
    raise SystemExit(serve_node(args.root, args.listen, args.fabric_dir, args.peer))


if __name__ == "__main__":
    main()
