"""Run a command with a staged root's /sys and /dev at the real paths, in a private mount namespace.

The same delivery ``mokka run`` provides, reduced to what the InfiniBand tools read: the staged
``sys`` is bind-mounted over ``/sys`` (an empty /sys if nothing is staged) and the staged ``dev``
is overlaid on ``/dev`` (the host's device nodes stay visible underneath).  Needs root (or
CAP_SYS_ADMIN) and ``unshare`` from util-linux; the host's mounts are never touched.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path

MOUNT_SCRIPT = """
set -e
if [ -d {sys} ]; then mount --bind {sys} /sys; else mount -t tmpfs -o ro mokka-empty /sys; fi
if [ -d {dev} ]; then mount -t overlay mokka-dev -o lowerdir={dev}:/dev /dev; fi
exec "$@"
"""


def namespaced(root: Path, argv: Sequence[str]) -> list[str]:
    """The argv that runs ``argv`` inside a private mount namespace showing ``root`` at /sys and /dev."""
    script = MOUNT_SCRIPT.format(sys=shlex.quote(str(root / "sys")), dev=shlex.quote(str(root / "dev")))
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "mokka-sim-ib", *argv]


def run_on_node(root: Path, argv: Sequence[str], env: dict[str, str] | None = None,
                timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(namespaced(root, argv), env=env, capture_output=True, text=True, timeout=timeout)
