"""``mokka-sim-ib``: stage, tear down, serve and check the ib surface alone."""

from mokka_core.simcli import make_app, run

from .surface import IbSurface

app = make_app(
    IbSurface,
    "InfiniBand surface of a simulated NVIDIA GPU node: ConnectX HCAs in sysfs and /dev/infiniband.",
)


def main() -> None:
    run(app)
