"""``mokka-sim-imex``: stage, tear down, serve and check the imex surface alone."""

from mokka_core.cli.sim import make_app, run

from .surface import ImexSurface

app = make_app(
    ImexSurface,
    "IMEX surface of a simulated NVIDIA GPU node: channel devices, capabilities, fake nvidia-imex.",
)


def main() -> None:
    run(app)
