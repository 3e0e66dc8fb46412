"""``mokka-sim-nvlink``: stage, tear down, serve and check the nvlink surface alone; ``links`` shows the model."""

from typing import Annotated

import typer

from mokka_core.cli.options import GpusOpt, NodeNameOpt, OverlayFileOpt, ProfileFileOpt, ProfileOpt
from mokka_core.cli.sim import make_app, run
from mokka_core.model.spec import NodeSpec

from .surface import NvlinkSurface
from .topology import fabric_placement, render_links, render_matrix

app = make_app(NvlinkSurface, "NVLink surface of a simulated NVIDIA GPU node: links, NV# matrix, cliques.")

LinksFailedOpt = Annotated[bool, typer.Option("--failed", help="Links in their failed form (inactive).")]


@app.command()
def links(profile: ProfileOpt = None, profile_file: ProfileFileOpt = None, gpus: GpusOpt = None,
          node_name: NodeNameOpt = None, overlay_file: OverlayFileOpt = None, failed: LinksFailedOpt = False) -> None:
    """Print the NV# matrix, every link and the fabric placement this node's NVML view must show.

    Example: mokka-sim-nvlink links --profile gb200 --gpus 4
    """
    node = NodeSpec(profile=profile, profile_file=profile_file, gpus=gpus, node_name=node_name,
                    overlay_file=overlay_file,
                    surfaces={"nvlink": {"enabled": True, "state": "failed" if failed else "healthy"}}).resolve()
    typer.echo(render_matrix(node), nl=False)
    typer.echo(render_links(node), nl=False)
    placement = fabric_placement(node)
    if placement:
        typer.echo(f"Fabric: ClusterUUID {placement[0]}, CliqueId {placement[1]}")


def main() -> None:
    run(app)
