"""``mokka-sim-gpu``: stage, tear down, serve and check the gpu surface alone."""

from mokka_core.cli.sim import make_app, run

from .surface import GpuSurface

app = make_app(
    GpuSurface,
    "Driver footprint of a simulated NVIDIA GPU node: NVML library chain, /dev/nvidia*, /proc/driver/nvidia, modules.",
)


def main() -> None:
    run(app)
