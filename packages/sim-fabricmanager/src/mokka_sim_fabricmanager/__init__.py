"""mokka-sim-fabricmanager: fabric manager of a simulated NVIDIA GPU node: fake nv-fabricmanager."""

from .version import __version__

__all__ = ["__version__"]
