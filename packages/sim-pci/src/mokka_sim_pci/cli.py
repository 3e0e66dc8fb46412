"""``mokka-sim-pci``: stage, tear down, serve and check the pci surface alone."""

from mokka_core.cli.sim import make_app, run

from .surface import PciSurface

app = make_app(
    PciSurface,
    "PCI sysfs tree of a simulated NVIDIA GPU node: GPUs, NVSwitches and HCAs with config space.",
)


def main() -> None:
    run(app)
