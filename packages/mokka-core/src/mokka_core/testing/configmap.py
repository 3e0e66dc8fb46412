"""A ConfigMap volume as the kubelet lays it out and updates it in a running pod, for tests of file watchers.

The kubelet's atomic writer (``pkg/volume/util/atomic_writer.go``) keeps the files in a timestamped
directory, ``..data`` a link to it, and each top-level name a link through ``..data``
(``profile.yaml -> ..data/profile.yaml``).  An update writes a new timestamped directory, points a
``..data_tmp`` link at it, renames that over ``..data`` (the one atomic step) and removes the old
directory: the links named by the pod never change, and no event names them.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

DATA = "..data"


def write_configmap_volume(directory: Path, files: Mapping[str, str]) -> None:
    """Make ``directory`` hold exactly ``files`` ({relative path: text}) as the kubelet does, the first time
    and at every update: a new payload directory, swapped in by renaming a ``..data`` link."""
    directory.mkdir(parents=True, exist_ok=True)
    payload = Path(tempfile.mkdtemp(prefix=time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime()), dir=directory))
    os.chmod(payload, 0o755)
    for rel, text in files.items():
        path = payload / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    data = directory / DATA
    old = os.readlink(data) if data.is_symlink() else None
    swap = directory / f"{DATA}_tmp"
    swap.symlink_to(payload.name)
    os.rename(swap, data)
    names = {rel.split("/", 1)[0] for rel in files}
    for name in names:
        link = directory / name
        if not link.is_symlink():
            link.symlink_to(f"{DATA}/{name}")
    for entry in directory.iterdir():  # the links to names the update no longer has
        if entry.is_symlink() and not entry.name.startswith("..") and entry.name not in names:
            entry.unlink()
    if old is not None:
        shutil.rmtree(directory / old)
