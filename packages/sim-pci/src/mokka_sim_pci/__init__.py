"""mokka-sim-pci: PCI sysfs tree of a simulated NVIDIA GPU node: GPUs, NVSwitches and HCAs with config space."""

from .version import __version__

__all__ = ["__version__"]
