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
from collections.abc import Mapping
from pathlib import Path

DATA = "..data"


class ConfigMapVolume:
    """``directory`` holding ``files`` ({relative path: text}) as the kubelet does; :meth:`update` as it does."""

    def __init__(self, directory: Path, files: Mapping[str, str]) -> None:
        self.directory = directory
        self._generation = 0
        directory.mkdir(parents=True, exist_ok=True)
        self.update(files)

    def update(self, files: Mapping[str, str]) -> None:
        """Replace every file at once: a new payload directory, swapped in by renaming a ``..data`` link."""
        self._generation += 1
        payload = f"..{os.getpid()}_{self._generation}"
        for rel, text in files.items():
            path = self.directory / payload / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        data = self.directory / DATA
        old = os.readlink(data) if data.is_symlink() else None
        swap = self.directory / f"{DATA}_tmp"
        swap.symlink_to(payload)
        os.rename(swap, data)
        names = {rel.split("/", 1)[0] for rel in files}
        for name in names:
            link = self.directory / name
            if not link.is_symlink():
                link.symlink_to(f"{DATA}/{name}")
        for entry in self.directory.iterdir():  # the links to names the update no longer has
            if entry.is_symlink() and not entry.name.startswith("..") and entry.name not in names:
                entry.unlink()
        if old is not None:
            shutil.rmtree(self.directory / old)
