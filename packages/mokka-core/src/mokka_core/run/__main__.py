"""``python -m mokka_core.run ROOT -- CMD [ARGS...]``: run CMD with the node staged under ROOT at the real
paths, in a private mount namespace (what ``Node.run`` starts); exits with CMD's status."""

from __future__ import annotations

import sys
from pathlib import Path

from .command import CommandFailed, held_signals, run_on_root


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m mokka_core.run ROOT -- CMD [ARGS...]", file=sys.stderr)
        return 2
    try:
        with held_signals():
            return run_on_root(Path(argv[0]), argv[2:])
    except CommandFailed as exc:
        print(f"mokka: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
