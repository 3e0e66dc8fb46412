"""The fake ``nvidia-imex-ctl``: ``-q`` prints READY (exit 0) when every node of the domain is up."""

from __future__ import annotations

import argparse
import socket
import sys
from pathlib import Path

from mokka_core.errors import MokkaError
from mokka_core.stage.paths import find_root

from .config import CONFIG_FILE, load_config, load_nodes, own_address, own_entry
from .daemon import PROBE_TIMEOUT, QUERY

PROGRAM = "nvidia-imex-ctl"


def query(config_path: Path) -> tuple[bool, str]:
    """(ready, the daemon's answer or why there is none)."""
    config = load_config(config_path)
    address = config.cmd_ip or config.node_ip
    if address is None:
        address = own_address(config, own_entry(config, load_nodes(config.nodes_config)))
    try:
        with socket.create_connection((address, config.cmd_port), timeout=PROBE_TIMEOUT * 4) as conn:
            conn.sendall(QUERY)
            answer = conn.recv(256).decode(errors="replace").strip()
    except OSError as exc:
        return False, f"NOT_READY (no nvidia-imex daemon at {address}:{config.cmd_port}: {exc.strerror or exc})"
    return answer == "READY", answer or "NOT_READY (empty answer)"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=PROGRAM, description="Query the fake IMEX daemon of a simulated node.")
    parser.add_argument("-q", action="store_true", help="print READY and exit 0 when every IMEX node is up")
    parser.add_argument("-c", "--config", type=Path, default=None,
                        help=f"config file (default: <root>/{CONFIG_FILE})")
    parser.add_argument("--root", type=Path, default=None, help="staged root (default: $MOKKA_ROOT, else /)")
    args = parser.parse_args(argv)
    if not args.q:
        parser.print_usage(sys.stderr)
        sys.exit(2)
    try:
        ready, answer = query(args.config or find_root(args.root) / CONFIG_FILE)
    except MokkaError as exc:
        print(str(exc), file=sys.stderr)
        sys.exit(1)
    print(answer)
    sys.exit(0 if ready else 1)


if __name__ == "__main__":
    main()
