"""The node's CDI spec where the host's container runtime reads it (``mokka node up --cdi-spec-dir``).

In a pod the host's CDI directory is mounted apart from the root: a volume nested inside the root's would
leave its mount point (``var/run/cdi``) in the host's root after the pod is gone. The directory gets a
symlink ``nvidia.yaml`` to the spec the cdi surface stages under the root, whose path is the host's too
(the root is mounted at its host path). The runtime reads the spec through it as it is now (containerd
refreshes its CDI cache for every container that names a CDI device); teardown removes the link.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import MokkaError
from ..stage.layout import CDI_SPEC

LINK_NAME = "nvidia.yaml"


def make(directory: Path, root: Path) -> Path:
    """Link ``directory/nvidia.yaml`` to the root's spec; refuse to replace a file that is not such a link."""
    link, target = directory / LINK_NAME, str(root / CDI_SPEC)
    if os.path.lexists(link) and not _links_to(link, target):
        raise MokkaError(f"{link}: exists and is not this node's CDI spec link (-> {target}): left as it is")
    temp = directory / f".{LINK_NAME}.mokka-{os.getpid()}"
    try:
        temp.unlink(missing_ok=True)
        os.symlink(target, temp)
        os.replace(temp, link)
    except OSError as exc:
        temp.unlink(missing_ok=True)
        raise MokkaError(f"{link}: cannot link the node's CDI spec: {exc.strerror}") from None
    return link


def remove(link: str | Path, root: Path) -> bool:
    """Remove ``link`` if it is still this node's; False only when it could not be removed."""
    link = Path(link)
    if not _links_to(link, str(root / CDI_SPEC)):
        return True
    try:
        link.unlink()
    except FileNotFoundError:
        pass
    except OSError:
        return False
    return True


def _links_to(link: Path, target: str) -> bool:
    try:
        return os.readlink(link) == target
    except OSError:
        return False
