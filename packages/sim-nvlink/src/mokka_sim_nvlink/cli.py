"""``mokka-sim-nvlink``: stage, tear down, serve and check the nvlink surface alone."""

from mokka_core.simcli import make_app, run

from .surface import NvlinkSurface

app = make_app(NvlinkSurface, "NVLink surface of a simulated NVIDIA GPU node: link state, remote endpoints, cliques and cluster UUIDs in the NVML view.")


def main() -> None:
    run(app)
