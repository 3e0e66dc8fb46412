"""mokka-sim-nvlink: NVLink surface of a simulated NVIDIA GPU node: link state, remote endpoints, cliques and cluster UUIDs in the NVML view."""

from .version import __version__

__all__ = ["__version__"]
