"""mokka-sim-nvlink: NVLink surface of a simulated NVIDIA GPU node: links, remote endpoints, cliques, cluster UUIDs."""

from .version import __version__

__all__ = ["__version__"]
