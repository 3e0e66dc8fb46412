"""Fixtures: a node's NVML view (mock library + state file) under a root, and real nvidia-smi."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from mokka_core.model.node import Node
from mokka_core.stage.paths import LIB_DIR
from mokka_core.testing.consumers import ConsumerUnavailable, missing, nvidia_smi
from mokka_core.testing.nvml import stage_nvml_view

SmiRunner = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def nvml_view(tmp_path: Path) -> Callable[[Node], Path]:
    def make(node: Node, name: str = "node") -> Path:
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
