"""A service started ahead of its node: its interpreter up and its module imported, then held until let go.

    python -m mokka_core.run.prestart FD -- PROGRAM [ARGS...]

``mokka run`` starts each ``python -m MODULE`` service it waits for (one with a ready path) this way as soon
as the node is planned, so its interpreter's start-up and imports overlap the staging (a native program is
simply started once the namespace is set up: it has nothing to import; nor is a service nothing waits for).
They start in ``mokka run``'s own namespaces, where nothing moves while they import (the command's namespace
is being mounted meanwhile).  What comes on FD
lets the service run: ``go``, or ``PID ROOTLESS``: first enter the mount namespace of PID (and its user
namespace where ROOTLESS is 1).  The service then runs its module's ``main(ARGS)``, already imported (a
program given in another form is exec'd).  End of file (the run gave up) exits 0 without running it.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 3 or args[1] != "--" or not args[0].isdigit():
        raise SystemExit("usage: python -m mokka_core.run.prestart FD -- PROGRAM [ARGS...]")
    gate, program = int(args[0]), args[2:]
    service = _imported_main(program)
    word = os.read(gate, 64).decode()
    os.close(gate)
    if not word:
        raise SystemExit(0)
    if word != "go":
        from .namespace import Joinable  # single-threaded here, as setns needs

        pid, rootless = word.split()
        joined = Joinable(int(pid), rootless == "1")
        try:
            joined.join()
        finally:
            joined.close()
    if service is None:
        os.execv(program[0], program)
    module, service_args = sys.modules[program[2]], program[3:]
    sys.argv = [module.__file__ or program[2], *service_args]
    service(service_args)


def _imported_main(program: list[str]) -> Callable[[list[str]], object] | None:
    """``main`` of the module a ``python -m MODULE`` program runs, imported now (None for other programs)."""
    if not runs_a_module(program):
        return None
    service = getattr(importlib.import_module(program[2]), "main", None)
    return service if callable(service) else None


def runs_a_module(program: list[str]) -> bool:
    """Whether ``program`` is ``python -m MODULE ...`` with this interpreter (what holding it ahead can import)."""
    return len(program) >= 3 and program[1] == "-m" and os.path.realpath(program[0]) == os.path.realpath(sys.executable)


if __name__ == "__main__":
    main()
