"""Optional cluster components: the allocation watcher and the NRI injection plugin.

They need the ``cluster`` extra (``pip install mokka-core[cluster]``: grpcio and
protobuf); nothing else in mokka-core imports this package.
"""

from __future__ import annotations


class MissingClusterExtra(ImportError):
    """grpcio or protobuf is not installed."""


def require_extra(module: str) -> None:
    """Import ``module`` (``grpc``, ``google.protobuf``) or explain which extra provides it."""
    import importlib

    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise MissingClusterExtra(
            f"{module} is not installed: the cluster components need `pip install 'mokka-core[cluster]'`"
        ) from exc
