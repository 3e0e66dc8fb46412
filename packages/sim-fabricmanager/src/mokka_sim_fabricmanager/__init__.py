"""mokka-sim-fabricmanager: Fabric manager surface of a simulated NVIDIA GPU node: a fake nv-fabricmanager daemon whose readiness drives fabric state."""

from .version import __version__

__all__ = ["__version__"]
