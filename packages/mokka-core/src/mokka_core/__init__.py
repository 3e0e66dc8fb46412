"""mokka-core: the GPU profile, node state, surface plugin interface and shared runtime of Mokka."""

from __future__ import annotations

from .errors import CtlError
from .version import __version__

TYPE_CHECKING = False  # not typing's: nvml-mock-ctl imports this package first and must start fast
if TYPE_CHECKING:
    from typing import Any

    from .testing.node_api import Node

__all__ = ["CtlError", "Node", "__version__"]


def __getattr__(name: str) -> Any:
    # imported on first use: nvml-mock-ctl imports this package and must not pay for the node code
    if name == "Node":
        from .testing.node_api import Node

        return Node
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
