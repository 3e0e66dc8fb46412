"""Fabric state ``auto`` through real nvidia-smi: In Progress until the fabric manager is ready."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from mokka_core.model.spec import NodeSpec
from mokka_core.stage.store import FABRICMANAGER_READY
from mokka_core.stage.surface import StageContext
from mokka_core.testing.consumers import ConsumerUnavailable, missing, nvidia_smi
from mokka_core.testing.nvml import stage_nvml_view
from mokka_sim_fabricmanager.surface import FabricmanagerSurface

pytestmark = pytest.mark.consumer


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
        while state == "healthy" and not (tmp_path / FABRICMANAGER_READY).exists():
            assert time.monotonic() < deadline, "the fabric manager never became ready"
            time.sleep(0.1)
        lib_dir = stage_nvml_view(tmp_path, node, follow_fabric_manager=True)
        result = subprocess.run([str(smi), "-q", "-i", "0"], capture_output=True, text=True, timeout=60,
                                env={**os.environ, "LD_LIBRARY_PATH": str(lib_dir)})
    finally:
        proc.terminate()
        proc.communicate(timeout=10)
    assert result.returncode == 0, result.stderr
    assert re.search(r"Fabric\n\s+State\s+: (.*)\n", result.stdout).group(1) == shown
