"""Stage just the NVML part of a node (library chain + state file) for tests of surfaces beside sim-gpu."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ..model.apply import apply
from ..model.node import Node
from ..stage import render
from ..stage.native import native_dir
from ..stage.nvml_view import render_nvml_state
from ..stage.paths import LIB_DIR, NVML_STATE_FILE
from .consumers import missing


def stage_nvml_view(root: Path, node: Node, *, follow_fabric_manager: bool = False) -> Path:
    """What the gpu surface stages for NVML: the built mock library chain and the rendered state file.

    The state file carries the keys of every installed surface (NVLink, fabric state). With
    ``follow_fabric_manager`` a fabric state ``auto`` waits for the fake fabric manager's readiness
    marker under ``root`` (as on a node); without, the fabric is shown trained (Completed), as after
    a fabric manager, installed or not.  Returns the library directory (for ``LD_LIBRARY_PATH``);
    missing() when the library is not built.
    """
    built = native_dir()
    if built is None:
        missing("the mock libnvidia-ml is not built (make -C native install)")
    lib_dir = root / LIB_DIR
    lib_dir.mkdir(parents=True, exist_ok=True)
    for path in built.glob("libnvidia-ml.so*"):
        target = lib_dir / path.name
        if path.is_symlink():
            target.symlink_to(os.readlink(path))
        else:
            shutil.copy2(path, target)
    if not follow_fabric_manager and any(gpu.config.fabric is not None for gpu in node.gpus):
        node = apply(node, {"all": {"fabric": {"state": "completed"}}})
    ctx = render.with_contributions(render.context(root, booted_ms=0), node, render.installed_surfaces())
    (root / NVML_STATE_FILE).write_text(render_nvml_state(node, ctx.nvml))
    return lib_dir
