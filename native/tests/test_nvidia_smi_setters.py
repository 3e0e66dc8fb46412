"""Real nvidia-smi (Debian 535, 550 and 555) changes node state: every step its own process, read back by the next."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from conftest import nvml_env

pytestmark = pytest.mark.consumer

QUERY = "--query-gpu=index,power.limit,persistence_mode,compute_mode,ecc.mode.current,ecc.mode.pending"


def smi_in(smi: Path, lib_dir: Path, state: Path):
    def run(*args: str, user: str | None = None) -> subprocess.CompletedProcess[str]:
        argv = [str(smi), *args]
        if user:
            argv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *argv]
        return subprocess.run(argv, env=nvml_env(lib_dir, state), capture_output=True, text=True, timeout=60)

    return run


def rows(out: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.split(",")] for line in out.strip().splitlines()]


def test_settings_hold_across_processes(smi, lib_dir, state_file):
    run = smi_in(smi, lib_dir, state_file("h100"))
    before = rows(run(QUERY, "--format=csv,noheader").stdout)
    assert before[0] == ["0", "700.00 W", "Enabled", "Default", "Enabled", "Enabled"]  # qx-h100.xml
    done = run("-i", "0", "-pl", "500")
    assert done.returncode == 0 and "Power limit for GPU 00000000:1B:00.0 was set to 500.00 W from 700.00 W." \
        in done.stdout, done.stdout
    refused = run("-i", "0", "-pl", "9999")
    assert refused.returncode != 0
    assert "Provided power limit 9999.00 W is not a valid power limit which should be between 200.00 W and " \
           "700.00 W for GPU 00000000:1B:00.0" in refused.stdout + refused.stderr
    assert run("-i", "0", "-pm", "0").returncode == 0
    assert run("-i", "0", "-c", "EXCLUSIVE_PROCESS").returncode == 0
    ecc = run("-i", "0", "-e", "0")
    assert ecc.returncode == 0 and "Reboot required." in ecc.stdout
    after = rows(run(QUERY, "--format=csv,noheader").stdout)
    assert after[0] == ["0", "500.00 W", "Disabled", "Exclusive_Process", "Enabled", "Disabled"]
    assert after[1:] == before[1:]  # other GPUs untouched
    reset = run("-r", "-i", "0")
    assert reset.returncode == 0 and "GPU 00000000:1B:00.0 was successfully reset." in reset.stdout, reset.stdout
    assert rows(run(QUERY, "--format=csv,noheader").stdout)[0] == \
        ["0", "500.00 W", "Disabled", "Exclusive_Process", "Disabled", "Disabled"]


def test_reset_refused_while_processes_run(smi, lib_dir, state_file):
    run = smi_in(smi, lib_dir, state_file("h100", overrides={"device.2.process.0.pid": 4242}))
    busy = run("-r", "-i", "2")
    assert busy.returncode == 19 and "In use by another client" in busy.stdout + busy.stderr


@pytest.fixture
def open_dir():
    """A directory other users may enter (pytest's own are root-only)."""
    with tempfile.TemporaryDirectory(prefix="mokka-smi-") as d:
        os.chmod(d, 0o755)
        yield Path(d)


def test_setters_need_root(smi, lib_dir, state_file, open_dir):
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv, to run nvidia-smi as another user")
    state = open_dir / "mokka-nvml.state"
    shutil.copy(state_file("h100"), state)
    binary = open_dir / "nvidia-smi"
    shutil.copy(smi, binary)
    libs = open_dir / "lib"
    libs.mkdir()
    for name in ("libnvidia-ml.so.550.163.01", "libnvidia-ml.so.1"):
        shutil.copy(lib_dir / name, libs / name)
    run = smi_in(binary, libs, state)
    denied = run("-i", "0", "-pl", "500", user="65534")
    assert denied.returncode == 4
    assert "Failed to set power management limit for GPU 00000000:1B:00.0: Insufficient Permissions" in denied.stdout
    assert "GPU reset unavailable: Insufficient Permissions" in run("-r", "-i", "0", user="65534").stdout
    assert rows(run(QUERY, "--format=csv,noheader").stdout)[0][1] == "700.00 W"


def test_accounting_mode_holds_across_processes(smi, lib_dir, state_file):
    run = smi_in(smi, lib_dir, state_file("h100", n=2))
    query = ("--query-gpu=index,accounting.mode", "--format=csv,noheader")
    assert rows(run(*query).stdout) == [["0", "Disabled"], ["1", "Disabled"]]  # qx-h100.xml
    done = run("-i", "0", "-am", "1")
    assert done.returncode == 0 and "Enabled Accounting Mode for GPU 00000000:1B:00.0." in done.stdout, done.stdout
    assert rows(run(*query).stdout) == [["0", "Enabled"], ["1", "Disabled"]]
    assert run("-i", "0", "-am", "0").returncode == 0
    assert rows(run(*query).stdout)[0] == ["0", "Disabled"]
