"""mokka-core: the GPU profile, node state, surface plugin interface and shared runtime of Mokka."""

from .version import __version__

__all__ = ["__version__"]
