"""Real nvidia-smi (Debian's 550) agrees with nvml-mock-ctl faults and metrics on a staged node."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from mokka_core.ctl.cli import execute
from mokka_core.model.spec import NodeSpec
from mokka_core.stage import nodefile
from mokka_core.stage.native import native_dir
from mokka_core.stage.paths import LIB_DIR
from mokka_core.testing import consumers
from mokka_core.testing.runner import nvml_surface

pytest.importorskip("mokka_core.stage.nvml_view")
if native_dir() is None:
    pytest.skip("mock libnvidia-ml not built (make -C native install)", allow_module_level=True)

pytestmark = pytest.mark.consumer


@pytest.fixture
def node(tmp_path: Path):
    root = tmp_path / "root"
    nodefile.save(root, NodeSpec(profile="h100", gpus=4))
    surfaces = {"gpu": nvml_surface()}
    smi = consumers.require("nvidia-smi", version="550")

    def ctl(*argv: str) -> None:
        assert execute(["--root", str(root), *argv], surfaces=surfaces) == 0

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "LD_LIBRARY_PATH": str(root / LIB_DIR)}
        return subprocess.run([str(smi), *args], env=env, capture_output=True, text=True, timeout=60)

    ctl("temp", "0", "20")  # stages the gpu surface
    return ctl, run


def test_fallen_off_bus_gpu_is_lost_and_the_others_are_listed(node) -> None:
    ctl, smi = node
    ctl("fail", "3", "fallen-off-bus")
    listing = smi("-L")
    # nvidia-smi names the lost GPU by its bus id when it can read it from the driver's files, else by index
    assert re.search(r"Unable to determine the device handle for gpu (3|0000:[0-9a-f]{2}:00\.0): GPU is lost",
                     listing.stdout), listing.stdout
    assert [line.split(":")[0] for line in listing.stdout.splitlines() if line.startswith("GPU ")] == \
        ["GPU 0", "GPU 1", "GPU 2"]
    ctl("fail", "3", "healthy")
    assert smi("-L").stdout.count("GPU ") == 4


def test_ecc_uncorrectable_and_metrics_show_in_nvidia_smi(node) -> None:
    ctl, smi = node
    ctl("fail", "1", "ecc-uncorrectable")
    ctl("temp", "2", "83")
    ctl("power", "2", "412.5")
    ecc = smi("-q", "-d", "ECC", "-i", "1").stdout
    dram = [line for line in ecc.splitlines() if "DRAM Uncorrectable" in line]
    assert dram and all(int(line.split(":")[1]) == 1 for line in dram), ecc  # one error, counted once
    query = smi("--query-gpu=index,temperature.gpu,power.draw", "--format=csv,noheader,nounits", "-i", "2")
    index, temperature, power = (field.strip() for field in query.stdout.split(","))
    assert (index, temperature) == ("2", "83") and float(power) == pytest.approx(412.5, abs=0.5)
