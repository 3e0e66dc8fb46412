"""Fixtures: a node's NVML view (mock library + state file) under a root, and real nvidia-smi."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from mokka_core.native import native_dir
from mokka_core.paths import LIB_DIR, NVML_STATE_FILE
from mokka_core.state import NodeState
from mokka_core.testing.consumers import ConsumerUnavailable, missing, nvidia_smi

SmiRunner = Callable[..., subprocess.CompletedProcess[str]]


def stage_nvml_view(root: Path, node: NodeState) -> Path:
    """What the gpu surface stages for NVML: the built mock library chain and the rendered state file."""
    built = native_dir()
    if built is None:
        missing("the mock libnvidia-ml is not built (make -C native install)")
    try:
        view = importlib.import_module("mokka_core.nvml_view")
    except ModuleNotFoundError:
        missing("mokka_core.nvml_view (the NVML state renderer) is not in this mokka-core yet")
    lib_dir = root / LIB_DIR
    lib_dir.mkdir(parents=True, exist_ok=True)
    for path in built.glob("libnvidia-ml.so*"):
        target = lib_dir / path.name
        if path.is_symlink():
            target.symlink_to(os.readlink(path))
        else:
            shutil.copy2(path, target)
    (root / NVML_STATE_FILE).write_text(view.render_nvml_state(node))
    return lib_dir


@pytest.fixture
def nvml_view(tmp_path: Path) -> Callable[[NodeState], Path]:
    def make(node: NodeState, name: str = "node") -> Path:
        root = tmp_path / name
        stage_nvml_view(root, node)
        return root
    return make


@pytest.fixture(params=["535", "550"])
def smi(request: pytest.FixtureRequest) -> Callable[[Path], SmiRunner]:
    try:
        binary = nvidia_smi(request.param)
    except ConsumerUnavailable as exc:
        missing(str(exc))

    def bind(root: Path) -> SmiRunner:
        def run(*args: str) -> subprocess.CompletedProcess[str]:
            env = {**os.environ, "LD_LIBRARY_PATH": str(root / LIB_DIR)}
            return subprocess.run([str(binary), *args], capture_output=True, text=True, env=env, timeout=60)
        run.version = request.param  # type: ignore[attr-defined]
        return run
    return bind
