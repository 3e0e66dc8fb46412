"""``mokka-sim-nvlink``: stage, tear down, serve and check the nvlink surface alone."""

from mokka_core.simcli import make_app, run

from .surface import NvlinkSurface

app = make_app(
    NvlinkSurface,
    "NVLink surface of a simulated NVIDIA GPU node: links, remote endpoints, cliques, cluster UUIDs.",
)


def main() -> None:
    run(app)
