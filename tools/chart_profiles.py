#!/usr/bin/env python3
"""Copy mokka-core's built-in profiles (the single source) into charts/mokka/profiles/.

    python tools/chart_profiles.py            # copy; remove chart profiles mokka-core no longer has
    python tools/chart_profiles.py --check    # exit 1 and name each file that drifted (the chart tests run this)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SOURCE = REPO / "packages" / "mokka-core" / "src" / "mokka_core" / "schema" / "profiles"
TARGET = REPO / "charts" / "mokka" / "profiles"


def drift(source: Path = SOURCE, target: Path = TARGET) -> dict[str, str]:
    """File name -> what is wrong with the chart's copy."""
    wanted = {path.name: path.read_bytes() for path in sorted(source.glob("*.yaml"))}
    have = {path.name: path.read_bytes() for path in sorted(target.glob("*.yaml"))} if target.is_dir() else {}
    problems = {}
    for name, data in wanted.items():
        if name not in have:
            problems[name] = "missing from the chart"
        elif have[name] != data:
            problems[name] = "differs from mokka-core's copy"
    for name in have.keys() - wanted.keys():
        problems[name] = "is not a mokka-core profile"
    return problems


def sync(source: Path = SOURCE, target: Path = TARGET) -> list[str]:
    target.mkdir(parents=True, exist_ok=True)
    changed = []
    for name, problem in sorted(drift(source, target).items()):
        if (source / name).exists():
            (target / name).write_bytes((source / name).read_bytes())
        else:
            (target / name).unlink()
        changed.append(f"{name}: {problem}")
    return changed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="report drift instead of copying")
    args = parser.parse_args()
    if args.check:
        problems = drift()
        for name, problem in sorted(problems.items()):
            print(f"charts/mokka/profiles/{name} {problem}: run python tools/chart_profiles.py", file=sys.stderr)
        return 1 if problems else 0
    for line in sync():
        print(f"synced {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
