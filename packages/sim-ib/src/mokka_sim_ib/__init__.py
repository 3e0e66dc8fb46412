"""mokka-sim-ib: InfiniBand surface of a simulated NVIDIA GPU node: ConnectX HCAs in sysfs and /dev/infiniband."""

from .version import __version__

__all__ = ["__version__"]
