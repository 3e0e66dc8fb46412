"""Where things live under a staged root.  Nothing else in Mokka hard-codes these paths.

The root is ``/`` on a node that shows the simulation at the real paths, a private
directory under ``mokka run`` (mounted over the real paths in a private namespace),
or any directory in tests.
"""

from __future__ import annotations

import os
import sysconfig
from pathlib import Path

from ..errors import MokkaError

#: Mokka's own bookkeeping under a root: node spec, override file, manifests, logs.
STATE_DIR = "var/lib/mokka"
NODE_FILE = f"{STATE_DIR}/node.json"
OVERRIDE_FILE = f"{STATE_DIR}/overrides.yaml"
OVERLAY_FILE = f"{STATE_DIR}/topology.yaml"
LOCK_FILE = f"{STATE_DIR}/overrides.yaml.lock"
#: Runtime markers of the simulated daemons.
RUN_DIR = f"{STATE_DIR}/run"
#: Exists exactly while the fake fabric manager has the fabric trained; the NVML library reports
#: fabric state ``auto`` as In Progress until it exists, then Completed.
FABRICMANAGER_READY_FILE = f"{RUN_DIR}/fabricmanager.ready"

#: Default root of a cluster node (hostPath), used when neither --root nor $MOKKA_ROOT is given.
CLUSTER_ROOT = Path("/var/lib/mokka/root")


def multiarch() -> str:
    """Debian's multiarch triplet, e.g. x86_64-linux-gnu (where the real driver installs its libraries)."""
    return sysconfig.get_config_var("MULTIARCH") or f"{os.uname().machine}-linux-gnu"


#: The driver library directory, as the NVIDIA packages of Debian/Ubuntu install it.
LIB_DIR = f"usr/lib/{multiarch()}"
#: The flat NVML state file the mock library reads; next to the library, found without an env var.
NVML_STATE_FILE = f"{LIB_DIR}/mokka-nvml.state"


def find_root(explicit: Path | None = None, *, required: bool = False) -> Path:
    """The root a command acts on: --root, else $MOKKA_ROOT, else a cluster node's root, else /.

    ``required``: never fall back to / (a surface command that writes would stage into the host);
    refuse instead, so / is used only when asked for (``--root /``).
    """
    if explicit is not None:
        return explicit
    env = os.environ.get("MOKKA_ROOT")
    if env:
        return Path(env)
    if (CLUSTER_ROOT / NODE_FILE).exists():
        return CLUSTER_ROOT
    if required:
        raise MokkaError(f"no node root: give --root DIR (--root / means this host itself), set $MOKKA_ROOT, "
                         f"or run on a cluster node (a node staged under {CLUSTER_ROOT})")
    return Path("/")
