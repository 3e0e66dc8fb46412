"""The MAD responder as a long-lived service, in the foreground (SIGTERM stops it).

``python -m mokka_sim_ib.responder_service --root R`` is what the surface's service runs: it loads
no CLI, no profile schema, no node model, no asyncio and no logging (a node at rest runs one per
node, so its size counts); ``mokka-sim-ib respond`` is the same for a person.
"""

from __future__ import annotations

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


USAGE = f"usage: {PROGRAM} [--root ROOT] [--listen HOST:PORT] [--fabric-dir DIR] [--peer HOST:PORT ...]"
HELP = f"""{USAGE}

MAD responder of a simulated node's HCAs.

  --root ROOT          staged root (default: $MOKKA_ROOT)
  --listen HOST:PORT   TCP address for other nodes' responders (default: $MOKKA_IB_LISTEN, else 127.0.0.1:0)
  --fabric-dir DIR     where responders of one machine find each other (default: $MOKKA_IB_FABRIC_DIR, else
                       {DEFAULT_FABRIC_DIR})
  --peer HOST:PORT     another node's responder (repeatable; $MOKKA_IB_PEERS, comma-separated)"""
OPTIONS = ("--root", "--listen", "--fabric-dir", "--peer")


def parse(argv: list[str]) -> list[tuple[str, str]]:
    """``--name VALUE`` / ``--name=VALUE`` pairs in order; ``-h``/``--help`` as ``("--help", "")``.

    By hand, not getopt or argparse: they load gettext (and argparse the locale and shutil modules), a fifth
    of this service's start-up and most of a megabyte that it would keep (one runs per node).
    """
    options, args = [], list(argv)
    while args:
        arg = args.pop(0)
        if arg in ("-h", "--help"):
            options.append(("--help", ""))
            continue
        name, given, value = arg.partition("=")
        if name not in OPTIONS:
            raise ValueError(f"option {arg} not recognized" if arg.startswith("-") else f"unexpected argument {arg!r}")
        if not given:
            if not args:
                raise ValueError(f"option {name} requires argument")
            value = args.pop(0)
        options.append((name, value))
    return options


def main(argv: list[str] | None = None) -> None:
    try:
        options = parse(sys.argv[1:] if argv is None else argv)
    except ValueError as exc:
        print(f"{PROGRAM}: {exc}\n{USAGE}", file=sys.stderr)
        sys.exit(2)
    given = dict(options)  # the last of a repeated option counts, except --peer
    if "--help" in given:
        print(HELP)
        sys.exit(0)
    root = Path(given["--root"]) if "--root" in given else None
    listen = given.get("--listen", os.environ.get("MOKKA_IB_LISTEN", "127.0.0.1:0"))
    fabric_dir = Path(given.get("--fabric-dir", os.environ.get("MOKKA_IB_FABRIC_DIR", DEFAULT_FABRIC_DIR)))
    peers = [value for name, value in options if name == "--peer"]
    sys.exit(serve(find_root(root), listen, fabric_dir, peers))


if __name__ == "__main__":
    main()
