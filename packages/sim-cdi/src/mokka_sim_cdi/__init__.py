"""mokka-sim-cdi: CDI spec of a simulated NVIDIA GPU node: /var/run/cdi/nvidia.yaml for container runtimes."""

from .version import __version__

__all__ = ["__version__"]
