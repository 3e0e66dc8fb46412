"""mokka-sim-gpu: Driver footprint of a simulated NVIDIA GPU node: the mock NVML library chain, /dev/nvidia*, /proc/driver/nvidia and kernel-module state."""

from .version import __version__

__all__ = ["__version__"]
