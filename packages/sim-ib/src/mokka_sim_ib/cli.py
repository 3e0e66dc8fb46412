"""``mokka-sim-ib``: stage, tear down, serve and check the ib surface; run its responder; run a tool on a node."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from mokka_core.cli.sim import RootOpt, make_app, run

from . import config, responder
from .namespace import namespaced
from .shim import shim_environment
from .surface import IbSurface

SUMMARY = (
    "InfiniBand surface of a simulated NVIDIA GPU node: ConnectX HCAs in /sys/class/infiniband and /dev/infiniband."
)
DEFAULT_FABRIC_DIR = "/run/mokka/ib-fabric"

app = make_app(IbSurface, SUMMARY)

ListenOpt = Annotated[str, typer.Option(envvar="MOKKA_IB_LISTEN", help="TCP address for other nodes' responders.")]
FabricDirOpt = Annotated[
    Path, typer.Option(envvar="MOKKA_IB_FABRIC_DIR", help="Directory where responders of one machine find each other.")
]
PeerOpt = Annotated[
    Optional[list[str]],
    typer.Option(help="HOST:PORT of another node's responder (repeatable; $MOKKA_IB_PEERS, comma-separated)."),
]
MountOpt = Annotated[
    bool, typer.Option(help="Show the staged /sys and /dev at the real paths (private mount namespace; root).")
]


@app.command()
def respond(root: RootOpt = Path("/"), listen: ListenOpt = "127.0.0.1:0",
            fabric_dir: FabricDirOpt = Path(DEFAULT_FABRIC_DIR), peer: PeerOpt = None) -> None:
    """Run the MAD responder of the node staged under --root in the foreground (SIGTERM stops it)."""
    peers = list(peer or []) + [p for p in os.environ.get("MOKKA_IB_PEERS", "").split(",") if p]
    logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="sim-ib responder: %(message)s", force=True)
    try:
        addresses = [responder.parse_address(p) for p in peers]
        responder.run(root / config.NODE_CONFIG, root / config.SOCKET, responder.parse_address(listen), fabric_dir,
                      addresses)
    except ValueError as exc:
        typer.echo(f"sim-ib responder: {exc}", err=True)
        raise typer.Exit(2) from None
    except FileNotFoundError as exc:
        typer.echo(f"sim-ib responder: {exc.filename}: not staged (run `mokka-sim-ib stage` first)", err=True)
        raise typer.Exit(1) from None


@app.command("exec", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def exec_cmd(ctx: typer.Context, root: RootOpt = Path("/"), mount: MountOpt = True) -> None:
    """Run a command on the node staged under --root, shim preloaded. Example: exec --root R -- ibping -L 0x2f49"""
    if not ctx.args:
        raise typer.BadParameter("give the command to run after --")
    env = shim_environment(root)
    argv = namespaced(root, ctx.args) if mount else list(ctx.args)
    os.execvpe(argv[0], argv, env)


def main() -> None:
    run(app)
