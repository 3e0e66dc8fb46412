"""The ``nv-fabricmanager`` command: execs the fake fabric manager, a small C program, and answers ``--version``.

The daemon itself is ``native/fabricmanager/nv-fabricmanager.c``, installed in mokka-core's native bundle by
``make -C native install``: readiness marker, init delay, clean shutdown (see the package README).
Only ``-v/--version`` is answered here, by :func:`mokka_core.node.foreground.print_version`: the version is
the node's driver's, which takes the node's profile resolved.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from mokka_core.errors import MokkaError
from mokka_core.stage.native import native_library

PROGRAM = "nv-fabricmanager"
#: what the real ``--version`` prints, ``{driver}`` the driver version (see the package README)
VERSION_TEXT = "Fabric Manager version is : {driver}"
VERSION_FLAGS = frozenset({"-v", "--version"})
#: the daemon's options that take a value (the next argument, unless given as ``--opt=value``)
TAKES_VALUE = frozenset({"-c", "--config", "--root", "--init-delay"})


def binary() -> Path:
    """The built daemon in mokka-core's native bundle."""
    found = native_library(PROGRAM)
    if found is None:
        raise MokkaError(f"{PROGRAM} is not built: run `make -C native install` (or `make setup`) in the checkout")
    return found


def version_request(args: list[str]) -> tuple[bool, Path | None]:
    """Whether ``args`` ask for the version, and the ``--root`` they give."""
    asked, root = False, None
    words = iter(args)
    for arg in words:
        if arg in VERSION_FLAGS:
            asked = True
        elif arg in TAKES_VALUE:
            value = next(words, None)
            if arg == "--root" and value is not None:
                root = Path(value)
        elif arg.startswith("--root="):
            root = Path(arg.removeprefix("--root="))
    return asked, root


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    asked, root = version_request(args)
    if asked:
        from mokka_core.node.foreground import print_version

        print_version(PROGRAM, VERSION_TEXT, root)
    try:
        daemon = binary()
    except MokkaError as exc:
        raise SystemExit(f"{PROGRAM}: {exc}") from None
    os.execv(daemon, [PROGRAM, *args])


if __name__ == "__main__":
    main()
