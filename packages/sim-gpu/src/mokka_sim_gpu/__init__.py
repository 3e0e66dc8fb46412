"""mokka-sim-gpu: driver footprint of a simulated NVIDIA GPU node (NVML library, /dev, /proc, modules)."""

from .version import __version__

__all__ = ["__version__"]
