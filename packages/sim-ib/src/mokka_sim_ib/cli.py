"""``mokka-sim-ib``: stage, tear down, serve and check the ib surface; run its responder; run a tool on a node."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from mokka_core.cli.options import RootOpt
from mokka_core.cli.sim import make_app, node_root, run
from mokka_core.errors import MokkaError

from .responder import DEFAULT_FABRIC_DIR
from .surface import SHIM_NAME, IbSurface, consumer_needs, shim_path

SUMMARY = (
    "InfiniBand surface of a simulated NVIDIA GPU node: ConnectX HCAs in /sys/class/infiniband and /dev/infiniband."
)

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
    bool, typer.Option(help="Show the staged node at the real paths (private mount namespace, as `mokka run`).")
]
ShimOpt = Annotated[bool, typer.Option(help="Preload the shim (MAD and verbs tools need it).")]


@app.command()
def respond(root: RootOpt = None, listen: ListenOpt = "127.0.0.1:0",
            fabric_dir: FabricDirOpt = Path(DEFAULT_FABRIC_DIR), peer: PeerOpt = None) -> None:
    """Run the MAD responder of the node staged under --root in the foreground (SIGTERM stops it).

    Example: mokka-sim-ib respond --root /tmp/node --fabric-dir /run/mokka/ib-fabric
    """
    from . import responder

    argv = [*responder.command(node_root(root)), "--listen", listen, "--fabric-dir", str(fabric_dir)]
    for address in peer or []:
        argv += ["--peer", address]
    os.execv(argv[0], [responder.PROGRAM, *argv[1:]])  # $MOKKA_IB_PEERS and $MOKKA_IB_SOCKET_GROUP go along


@app.command("exec", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def exec_cmd(ctx: typer.Context, root: RootOpt = None, mount: MountOpt = True, shim: ShimOpt = True) -> None:
    """Run a command on the node staged under --root, shim preloaded.

    Example: mokka-sim-ib exec --root /tmp/node -- ibstat
    """
    from mokka_core.run.command import CommandFailed, held_signals, run_on_root

    if not ctx.args:
        raise typer.BadParameter("give the command to run after --")
    if shim and shim_path() is None:
        raise MokkaError(f"{SHIM_NAME} is not built: run `make -C packages/sim-ib/native install`")
    where = node_root(root)
    env = consumer_needs(where).apply(os.environ) if shim else dict(os.environ)
    if not mount:
        os.execvpe(ctx.args[0], ctx.args, env)
    try:
        with held_signals():
            status = run_on_root(where, list(ctx.args), env)
    except CommandFailed as exc:
        typer.echo(f"mokka-sim-ib: {exc}", err=True)
        raise typer.Exit(exc.exit_code) from None
    raise typer.Exit(status)


def main() -> None:
    run(app)
