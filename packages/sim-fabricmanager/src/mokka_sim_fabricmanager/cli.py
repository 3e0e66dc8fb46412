"""``mokka-sim-fabricmanager``: stage, tear down, serve and check the fabricmanager surface alone."""

from mokka_core.simcli import make_app, run

from .surface import FabricmanagerSurface

app = make_app(FabricmanagerSurface, "Fabric manager surface of a simulated NVIDIA GPU node: a fake nv-fabricmanager daemon whose readiness drives fabric state.")


def main() -> None:
    run(app)
