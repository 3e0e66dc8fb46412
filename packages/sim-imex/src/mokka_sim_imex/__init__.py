"""mokka-sim-imex: IMEX surface of a simulated NVIDIA GPU node: channel devices, capabilities, fake nvidia-imex."""

from .version import __version__

__all__ = ["__version__"]
