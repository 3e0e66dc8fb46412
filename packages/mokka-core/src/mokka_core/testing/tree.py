"""A comparable picture of a directory tree, for "stage then teardown leaves no residue" tests."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path


def tree_snapshot(root: Path) -> dict[str, str]:
    """Every path under ``root`` -> what it is: link target, directory mode, file mode and content
    hash, or device mode and number (device nodes are never read)."""
    found: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                what = f"-> {os.readlink(path)}"
            elif stat.S_ISREG(info.st_mode):
                with open(path, "rb") as file:
                    what = f"{info.st_mode:o} {hashlib.sha256(file.read()).hexdigest()}"
            elif stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode):
                what = f"{info.st_mode:o} {os.major(info.st_rdev)}:{os.minor(info.st_rdev)}"
            else:
                what = f"{info.st_mode:o}"
            found[os.path.relpath(path, root)] = what
    return found
