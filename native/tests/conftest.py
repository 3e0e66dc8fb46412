"""Shared fixtures for the native (mock libnvidia-ml) tests."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

NATIVE = Path(__file__).resolve().parent.parent
ROOT = NATIVE.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from mkstate import consumers, make_state, write_state  # noqa: E402  (mkstate: the one mokka-core import)


@pytest.fixture(scope="session")
def lib_dir() -> Path:
    """Directory with libnvidia-ml.so.1; $MOKKA_NVML_LIB_DIR overrides (e.g. the ASan build)."""
    override = os.environ.get("MOKKA_NVML_LIB_DIR")
    if override:
        return Path(override)
    subprocess.run(["make", "-s", "-C", str(NATIVE), f"PYTHON={sys.executable}"], check=True)
    return NATIVE / "build"


@pytest.fixture()
def state_file(tmp_path: Path):
    """Factory: write a state file (shape, overrides) and return its path."""
    path = tmp_path / "mokka-nvml.state"

    def make(shape: str = "h100", n: int | None = None, overrides: dict | None = None, events=None,
             text: str | None = None) -> Path:
        write_state(path, text if text is not None else make_state(shape, n, overrides, events))
        return path

    return make


@pytest.fixture(scope="session", params=["535", "550", "555"])
def smi(request) -> Path:
    return consumers.require("nvidia-smi", version=request.param)


def nvml_env(lib_dir: Path, state: Path | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOKKA_NVML")}
    env["LD_LIBRARY_PATH"] = str(lib_dir)
    if state is not None:
        env["MOKKA_NVML_STATE"] = str(state)
    env.update(extra)
    preload = os.environ.get("MOKKA_TEST_LD_PRELOAD")  # the ASan runtime for the sanitizer run
    if preload:
        env["LD_PRELOAD"] = preload
    return env
