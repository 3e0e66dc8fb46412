"""A service started ahead of its node: its interpreter up and its module imported, then held until let go.

    python -m mokka_core.run.prestart FD -- PROGRAM [ARGS...]

``mokka run`` starts each service this way as soon as the command's namespace exists, so the services'
start-up overlaps the staging of the node.  One byte on FD lets the service run: a ``python -m MODULE``
service (the form surfaces declare) runs its module's ``main(ARGS)``, already imported; any other program
is exec'd.  End of file (the run gave up) exits 0 without running it.
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
    go = os.read(gate, 1)
    os.close(gate)
    if not go:
        raise SystemExit(0)
    if service is None:
        os.execv(program[0], program)
    module, service_args = sys.modules[program[2]], program[3:]
    sys.argv = [module.__file__ or program[2], *service_args]
    service(service_args)


def _imported_main(program: list[str]) -> Callable[[list[str]], object] | None:
    """``main`` of the module a ``python -m MODULE`` program runs, imported now (None for other programs)."""
    if len(program) < 3 or program[1] != "-m" or os.path.realpath(program[0]) != os.path.realpath(sys.executable):
        return None
    service = getattr(importlib.import_module(program[2]), "main", None)
    return service if callable(service) else None


if __name__ == "__main__":
    main()
