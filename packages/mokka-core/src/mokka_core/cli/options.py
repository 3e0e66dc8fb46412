"""The typer options more than one command takes, each defined once: one flag, one help text, one env rule.

(typer prints each option's environment variable in ``--help`` itself.)

The rule for environment variables: a single-valued node option falls back to
``$MOKKA_<OPTION>`` (``--node-name`` to ``$NODE_NAME``, which Kubernetes' downward API
sets); ``--root`` is found by :func:`mokka_core.stage.paths.find_root` (--root, else
``$MOKKA_ROOT``, else the cluster root when a node is staged there); repeatable
options have none.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ..schema.builtin import BUILTIN_PROFILES
from ..schema.surfaces import SURFACES


def _starting(names: tuple[str, ...] | list[str]) -> Callable[[str], list[str]]:
    """Shell completion of one of ``names``."""
    return lambda incomplete: [name for name in names if name.startswith(incomplete)]


RootOpt = Annotated[
    Optional[Path],
    typer.Option("--root", show_default=False,
                 help="Node root (default: $MOKKA_ROOT, else the cluster root /var/lib/mokka/root when a node "
                      "is staged there, else / where a node is staged at / and the command does not create one; "
                      "otherwise refused: --root / must be asked for)."),
]
ProfileOpt = Annotated[
    Optional[str],
    typer.Option("--profile", "-p", envvar="MOKKA_PROFILE",
                 help=f"Built-in profile: {', '.join(BUILTIN_PROFILES)}.", autocompletion=_starting(BUILTIN_PROFILES)),
]
ProfileFileOpt = Annotated[
    Optional[Path],
    typer.Option("--profile-file", envvar="MOKKA_PROFILE_FILE",
                 help="A profile YAML file; wins over --profile."),
]
GpusOpt = Annotated[
    Optional[int],
    typer.Option("--gpus", "-n", envvar="MOKKA_GPUS", help="GPU count (default: the profile's)."),
]
NodeNameOpt = Annotated[
    Optional[str],
    typer.Option("--node-name", envvar="NODE_NAME", help="Node name (default: mokka-node)."),
]
OverlayFileOpt = Annotated[
    Optional[Path],
    typer.Option("--overlay-file", envvar="MOKKA_OVERLAY_FILE",
                 help="Topology overlay: cluster UUID and clique per node name."),
]
DisableOpt = Annotated[list[str], typer.Option("--disable", help="Surface to leave out (repeatable).",
                                               autocompletion=_starting(SURFACES))]
FailOpt = Annotated[list[str], typer.Option("--fail", help="Surface to stage in its failed form (repeatable).",
                                            autocompletion=_starting(SURFACES))]


def version_option(program: str, version: Callable[[], str]) -> Any:
    """``--version``: print ``PROGRAM VERSION`` and exit (every command line has it, the same way)."""

    def show(value: bool) -> None:
        if value:
            typer.echo(f"{program} {version()}")
            raise typer.Exit()

    return typer.Option("--version", callback=show, is_eager=True, help="Print the version and exit.")
