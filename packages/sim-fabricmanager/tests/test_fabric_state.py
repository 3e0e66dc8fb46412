"""Fabric state ``auto`` through real nvidia-smi: In Progress until the fabric manager is ready."""

from __future__ import annotations

import importlib
import inspect
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from mokka_core.native import native_dir
from mokka_core.paths import LIB_DIR, NVML_STATE_FILE
from mokka_core.spec import NodeSpec
from mokka_core.surface import StageContext
from mokka_core.testing.consumers import ConsumerUnavailable, missing, nvidia_smi
from mokka_sim_fabricmanager.paths import FABRICMANAGER_READY_FILE
from mokka_sim_fabricmanager.surface import FabricmanagerSurface

pytestmark = pytest.mark.consumer


def nvml_view(root: Path, node) -> Path:
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
        if path.is_symlink():
            (lib_dir / path.name).symlink_to(os.readlink(path))
        else:
            shutil.copy2(path, lib_dir / path.name)
    render = view.render_nvml_state
    kwargs = {"root": root} if "root" in inspect.signature(render).parameters else {}
    (root / NVML_STATE_FILE).write_text(render(node, **kwargs))
    return lib_dir


@pytest.mark.parametrize(("state", "shown"), [("healthy", "Completed"), ("failed", "In Progress")])
def test_fabric_state_follows_the_fabric_manager(tmp_path: Path, state: str, shown: str) -> None:
    try:
        smi = nvidia_smi("550")
    except ConsumerUnavailable as exc:
        missing(str(exc))
    node = NodeSpec(profile="gb200", surfaces={"fabricmanager": {"state": state}}).resolve()
    (service,) = FabricmanagerSurface().services(node, StageContext(root=tmp_path))
    proc = subprocess.Popen(service.command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 5
        while state == "healthy" and not (tmp_path / FABRICMANAGER_READY_FILE).exists():
            assert time.monotonic() < deadline, "the fabric manager never became ready"
            time.sleep(0.1)
        lib_dir = nvml_view(tmp_path, node)
        result = subprocess.run([str(smi), "-q", "-i", "0"], capture_output=True, text=True, timeout=60,
                                env={**os.environ, "LD_LIBRARY_PATH": str(lib_dir)})
    finally:
        proc.terminate()
        proc.communicate(timeout=10)
    assert result.returncode == 0, result.stderr
    assert re.search(r"Fabric\n\s+State\s+: (.*)\n", result.stdout).group(1) == shown
