"""``/usr/bin/nvidia-smi``: the driver's command-line tool, as a driver install leaves it.

The binary is the profile's (``system.nvidia_smi``) or Debian's real one of the branch nearest
the driver version, from the cache the set-up fills (:mod:`mokka_core.stage.nvidia_smi`).
Staging never downloads: without a binary the node has none, and one warning (the first time
for this user) says how to get it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from mokka_core.errors import MokkaError
from mokka_core.stage import nvidia_smi
from mokka_core.stage.paths import say_once
from mokka_core.stage.surface import Copy, Entry

if TYPE_CHECKING:
    from mokka_core.model.node import Node

NVIDIA_SMI = "usr/bin/nvidia-smi"


def nvidia_smi_entries(node: Node) -> list[Entry]:
    named = node.system.nvidia_smi
    if named is not None:
        if not Path(named).is_file():
            raise MokkaError(f"profile: system.nvidia_smi: no such file: {named}")
        return [Copy(NVIDIA_SMI, Path(named), mode=0o755)]
    branch = nvidia_smi.closest_branch(node.driver_version)
    binary = nvidia_smi.cached(branch)
    if binary is None:
        import logging  # only here: logging costs nvml-mock-ctl, which re-plans this surface, milliseconds

        say_once(logging.getLogger(__name__), f"no-nvidia-smi-{branch}", f"gpu: {nvidia_smi.missing_message(branch)}")
        return []
    return [Copy(NVIDIA_SMI, binary, mode=0o755)]
