"""mokka-sim-imex: IMEX surface of a simulated NVIDIA GPU node: channel devices, capability files and a fake nvidia-imex daemon."""

from .version import __version__

__all__ = ["__version__"]
