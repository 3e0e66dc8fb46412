"""``mokka-sim-fabricmanager``: stage, tear down, serve and check the fabricmanager surface alone."""

from mokka_core.cli.sim import make_app, run

from .surface import FabricmanagerSurface

app = make_app(
    FabricmanagerSurface,
    "Fabric manager of a simulated NVIDIA GPU node: fake nv-fabricmanager driving fabric state.",
)


def main() -> None:
    run(app)
