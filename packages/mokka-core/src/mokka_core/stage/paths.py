"""Where things live under a staged root.  Nothing else in Mokka hard-codes these paths
(the names in Mokka's own state directory are :mod:`.store`'s).

The root is ``/`` on a node that shows the simulation at the real paths, a private
directory under ``mokka run`` (mounted over the real paths in a private namespace),
or any directory in tests.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import MokkaError
from .store import NodeStore

if TYPE_CHECKING:
    import logging

#: Default root of a cluster node (hostPath), used when neither --root nor $MOKKA_ROOT is given.
CLUSTER_ROOT = Path("/var/lib/mokka/root")


def multiarch() -> str:
    """Debian's multiarch triplet, e.g. x86_64-linux-gnu (where the real driver installs its libraries)."""
    # the interpreter knows it without sysconfig (which costs nvml-mock-ctl milliseconds to import)
    known = getattr(sys.implementation, "_multiarch", None)
    if known:
        return str(known)
    import sysconfig

    return sysconfig.get_config_var("MULTIARCH") or f"{os.uname().machine}-linux-gnu"


#: The driver library directory, as the NVIDIA packages of Debian/Ubuntu install it.
LIB_DIR = f"usr/lib/{multiarch()}"
#: The flat NVML state file the mock library reads; next to the library, found without an env var.
NVML_STATE_FILE = f"{LIB_DIR}/mokka-nvml.state"
#: What NVML setters changed, written by the library beside the state file (``stage/nvml_settings.py``).
NVML_SETTINGS_FILE = f"{LIB_DIR}/mokka-nvml.settings"
#: nvidia-persistenced's socket, which the NVIDIA container toolkit mounts into every GPU container: the gpu
#: surface's ``mokka-persistenced`` passes the state file to libraries that have none beside them there.
PERSISTENCED_SOCKET = "run/nvidia-persistenced/socket"


def user_cache(name: str) -> Path:
    """Mokka's cache directory ``name`` for this user: under ``$MOKKA_CACHE``, default ``~/.cache/mokka``.

    What staging may reuse but never needs (Debian's nvidia-smi, merged module indexes); it is
    created by whoever writes into it, and one that cannot be read counts as empty.
    """
    return Path(os.environ.get("MOKKA_CACHE") or Path.home() / ".cache" / "mokka") / name


def say_once(log: logging.Logger, key: str, message: str) -> None:
    """``message`` as a warning the first time for this user (a marker in Mokka's cache), later at debug.

    For what stays true on this machine until someone acts (no nvidia-smi fetched, a kernel
    without /proc/modules): every nvml-mock-ctl call re-plans the node, and one line is enough.
    """
    marker = user_cache("notices") / key
    try:
        seen = marker.exists()
    except OSError:  # a cache we may not read (HOME of another user): say it every time
        seen = False
    if seen:
        log.debug("%s", message)
        return
    log.warning("%s", message)
    import contextlib  # here: nvml-mock-ctl imports this module on its way to a change

    with contextlib.suppress(OSError):
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()


def find_root(explicit: Path | None = None, *, creates: bool = False) -> Path:
    """The root a command acts on: --root, else $MOKKA_ROOT, else a cluster node's root, else the
    node staged at / itself.  Never / by default otherwise: ``/`` is used only when asked for
    (``--root /``) or when a node is already staged there.

    ``creates``: the command makes a node (``mokka node up``, a surface's ``stage``): a node at /
    is not a default for it either, since as root it would write into the host.
    """
    if explicit is not None:
        return explicit
    env = os.environ.get("MOKKA_ROOT")
    if env:
        return Path(env)
    if NodeStore(CLUSTER_ROOT).node_file.exists():
        return CLUSTER_ROOT
    host = Path("/")
    if not creates and NodeStore(host).node_file.exists():
        return host
    raise MokkaError(f"no node root: give --root DIR (--root / means this host itself), set $MOKKA_ROOT, "
                     f"or run on a cluster node (a node staged under {CLUSTER_ROOT})")
