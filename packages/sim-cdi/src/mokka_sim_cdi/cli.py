"""``mokka-sim-cdi``: stage, tear down, serve and check the cdi surface alone."""

from mokka_core.cli.sim import make_app, run

from .surface import CdiSurface

app = make_app(CdiSurface, "CDI spec of a simulated NVIDIA GPU node: /var/run/cdi/nvidia.yaml for container runtimes.")


def main() -> None:
    run(app)
