"""The NVML setter record: read and cleared here, written by the library (real nvidia-smi, pynvml)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mokka_core.ctl.cli import execute
from mokka_core.errors import MokkaError
from mokka_core.model.spec import NodeSpec
from mokka_core.stage import nodefile, nvml_settings
from mokka_core.stage.native import native_dir
from mokka_core.stage.paths import LIB_DIR, NVML_SETTINGS_FILE
from mokka_core.testing import consumers
from mokka_core.testing.runner import nvml_surface


def write_record(root: Path, text: str) -> Path:
    path = root / NVML_SETTINGS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


HOLD_FLOCK = ("import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDONLY); "
              "fcntl.flock(fd, fcntl.LOCK_SH); print('held', flush=True); time.sleep(60)")


def hold_flock(path: Path) -> subprocess.Popen[str]:
    holder = subprocess.Popen([sys.executable, "-c", HOLD_FLOCK, str(path)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    return holder


def test_a_lock_any_user_can_take_does_not_hold_up_reset(tmp_path: Path) -> None:
    """The record's lock was a flock on its directory, which any user can open: reset then waited forever."""
    record = write_record(tmp_path, "mokka-nvml-settings 1\ndevice.0.power.limit_mw=500000\nend\n")
    holder = hold_flock(record.parent)
    try:
        clear = subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; "
                                "from mokka_core.stage import nvml_settings; "
                                "print(nvml_settings.clear(Path(sys.argv[1])))", str(tmp_path)],
                               capture_output=True, text=True, timeout=10)
    finally:
        holder.kill()
        holder.communicate()
    assert clear.stdout == "True\n" and not record.exists()
    assert (tmp_path / nvml_settings.LOCK_FILE).stat().st_mode & 0o777 == 0o600


def test_a_held_record_lock_makes_reset_give_up_naming_the_holder(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    write_record(tmp_path, "mokka-nvml-settings 1\ndevice.0.power.limit_mw=500000\nend\n")
    (tmp_path / nvml_settings.LOCK_FILE).touch(mode=0o600)
    holder = hold_flock(tmp_path / nvml_settings.LOCK_FILE)
    monkeypatch.setenv("MOKKA_LOCK_TIMEOUT_S", "0.3")
    try:
        with pytest.raises(MokkaError, match=f"{nvml_settings.LOCK_FILE} is held by pid {holder.pid}"):
            nvml_settings.clear(tmp_path)
    finally:
        holder.kill()
        holder.communicate()


def test_read_and_clear_per_gpu(tmp_path: Path) -> None:
    assert nvml_settings.read(tmp_path) == {}
    assert not nvml_settings.clear(tmp_path)
    write_record(tmp_path, "mokka-nvml-settings 1\ndevice.0.power.limit_mw=500000\ndevice.2.compute_mode=3\n"
                           "device.2.ecc.pending=0\nend\n")
    assert nvml_settings.read(tmp_path) == {0: {"power.limit_mw": "500000"},
                                            2: {"compute_mode": "3", "ecc.pending": "0"}}
    assert not nvml_settings.clear(tmp_path, [1])
    assert nvml_settings.clear(tmp_path, [2])
    assert nvml_settings.read(tmp_path) == {0: {"power.limit_mw": "500000"}}
    assert nvml_settings.clear(tmp_path)
    assert not (tmp_path / NVML_SETTINGS_FILE).exists()


@pytest.mark.parametrize("text", ["mokka-nvml-state 1\nend\n", "mokka-nvml-settings 1\ndevice.0.power.limit_mw=1\n",
                                  "mokka-nvml-settings 1\ndevice.x.power.limit_mw=1\nend\n"])
def test_a_bad_record_is_named(tmp_path: Path, text: str) -> None:
    path = write_record(tmp_path, text)
    with pytest.raises(MokkaError, match=str(path)):
        nvml_settings.read(tmp_path)


def test_a_record_the_library_accepts_never_stops_the_ctl(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown key (the library skips it) or a non-UTF-8 byte in a value made every verb fail, reset too."""
    root = tmp_path / "root"
    nodefile.save(root, NodeSpec(profile="h100", gpus=2))
    surfaces = {"gpu": nvml_surface()}
    assert execute(["--root", str(root), "temp", "0", "20"], surfaces=surfaces) == 0
    record = root / NVML_SETTINGS_FILE
    record.write_bytes(b"mokka-nvml-settings 1\ndevice.0.from_a_newer_library=1\ndevice.0.power.limit_mw=450000\n"
                       b"device.1.name=\xff\xfe\nend\n")
    for verb in (["temp", "1", "30"], ["status"], ["reset", "1"]):
        assert execute(["--root", str(root), *verb], surfaces=surfaces) == 0, verb
    assert "GPU 0: from_a_newer_library=1, power.limit_mw=450000" in capsys.readouterr().out
    assert nvml_settings.read(root) == {0: {"from_a_newer_library": "1", "power.limit_mw": "450000"}}
    assert execute(["--root", str(root), "reset"], surfaces=surfaces) == 0
    assert not record.exists()


@pytest.mark.parametrize("gpus", [None, [1]])
def test_reset_recovers_from_a_record_the_library_refuses(tmp_path: Path, gpus: list[int] | None) -> None:
    path = write_record(tmp_path, "not a record \xff")
    assert nvml_settings.clear(tmp_path, gpus)
    assert not path.exists()


needs_library = pytest.mark.skipif(native_dir() is None, reason="mock libnvidia-ml not built (make -C native install)")


@needs_library
@pytest.mark.consumer
def test_ctl_status_shows_and_reset_clears_what_nvidia_smi_set(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "root"
    nodefile.save(root, NodeSpec(profile="h100", gpus=4))
    surfaces = {"gpu": nvml_surface()}
    smi = consumers.require("nvidia-smi", version="550")

    def ctl(*argv: str) -> str:
        assert execute(["--root", str(root), *argv], surfaces=surfaces) == 0
        return capsys.readouterr().out

    def run(*args: str) -> str:
        env = {**os.environ, "LD_LIBRARY_PATH": str(root / LIB_DIR)}
        done = subprocess.run([str(smi), *args], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    ctl("temp", "0", "20")  # stages the gpu surface
    run("-i", "1", "-pl", "450")
    run("-i", "2", "-c", "EXCLUSIVE_PROCESS")
    run("-i", "3", "-mig", "1")
    run("mig", "-i", "3", "-cgi", "9", "-C")
    status = ctl("status")
    assert "GPU 1: power.limit_mw=450000, power.enforced_limit_mw=450000" in status
    assert "GPU 2: compute_mode=3" in status
    assert "GPU 3: mig.pending=1, mig.current=1; MIG 3g.40gb (GI 2, CI 0)" in status  # placed at 4:4, as real
    ctl("temp", "3", "40")  # a ctl change re-renders the state file: the settings stand over it
    assert run("--query-gpu=power.limit,compute_mode", "--format=csv,noheader", "-i", "1,2").split("\n")[:2] == \
        ["450.00 W, Default", "700.00 W, Exclusive_Process"]
    assert "NVML settings cleared" in ctl("reset", "1")
    assert run("--query-gpu=power.limit,compute_mode", "--format=csv,noheader", "-i", "1,2").split("\n")[:2] == \
        ["700.00 W, Default", "700.00 W, Exclusive_Process"]
    assert "NVML settings cleared" in ctl("reset")
    assert run("--query-gpu=compute_mode", "--format=csv,noheader", "-i", "2").strip() == "Default"


@needs_library
@pytest.mark.consumer
@pytest.mark.usefixtures("whole_node")
def test_mokka_run_power_limit_seen_by_the_next_process_and_pynvml() -> None:
    if os.geteuid() != 0 and not consumers.required():
        pytest.skip("mount namespaces need root (CI runs as root)")
    smi = consumers.require("nvidia-smi", version="550")
    pynvml = ("import pynvml as n; n.nvmlInit(); print('pynvml', *(n.nvmlDeviceGetPowerManagementLimit("
              "n.nvmlDeviceGetHandleByIndex(i)) for i in range(2)))")
    script = "; ".join([f"{smi} -i 0 -pl 500", f"{smi} -i 0 -pl 9999", f"{smi} -i 0 -e 0",
                        f"{smi} --query-gpu=power.limit,ecc.mode.current,ecc.mode.pending --format=csv,noheader",
                        f"{smi} -r -i 0", f"{smi} --query-gpu=ecc.mode.current --format=csv,noheader -i 0",
                        f"{sys.executable} -c \"{pynvml}\""])
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    done = subprocess.run([sys.executable, "-m", "mokka_core", "run", "--profile", "h100", "--gpus", "2", "--",
                           "sh", "-c", script], capture_output=True, text=True, timeout=180,
                          env={**os.environ, "PATH": path})
    out = done.stdout
    assert "Power limit for GPU 00000000:1B:00.0 was set to 500.00 W from 700.00 W." in out, out + done.stderr
    assert "Provided power limit 9999.00 W is not a valid power limit" in out
    assert "500.00 W, Enabled, Disabled\n700.00 W, Enabled, Enabled\n" in out  # -e 0 pending; GPU 1 untouched
    assert "was successfully reset." in out and "\nDisabled\n" in out  # the reset made it current
    assert "pynvml 500000 700000" in out


@needs_library
@pytest.mark.consumer
@pytest.mark.usefixtures("whole_node")
def test_mokka_run_mig_partition_seen_by_the_next_process_and_pynvml() -> None:
    if os.geteuid() != 0 and not consumers.required():
        pytest.skip("mount namespaces need root (CI runs as root)")
    smi = consumers.require("nvidia-smi", version="550")
    pynvml = ("import pynvml as n; n.nvmlInit(); g = n.nvmlDeviceGetHandleByIndex(0); "
              "ms = [n.nvmlDeviceGetMigDeviceHandleByIndex(g, i) for i in range(3)]; "
              "print('pynvml', *(round(n.nvmlDeviceGetMemoryInfo(m).total / 2**30, 2) for m in ms))")
    steps = [f"{smi} -i 0 -mig 1", f"{smi} mig -lgip -i 0", f"{smi} mig -i 0 -cgi 9,19,19 -C", f"{smi} -L",
             f"{sys.executable} -c \"{pynvml}\"", f"{smi} mig -dci", f"{smi} mig -dgi", f"{smi} -i 0 -mig 0",
             f"{smi} -L"]
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    done = subprocess.run([sys.executable, "-m", "mokka_core", "run", "--profile", "h100", "--gpus", "2", "--",
                           "sh", "-c", "; ".join(steps)], capture_output=True, text=True, timeout=180,
                          env={**os.environ, "PATH": path})
    out = done.stdout
    assert "|   0  MIG 3g.40gb        9     2/2        39.50      No     60     3     0   |" in out, out + done.stderr
    assert out.count("Successfully created compute instance") == 3
    listed = out.split("GPU 1:")[0]
    assert len(re.findall(r"^  MIG (3g\.40gb|1g\.10gb) +Device +\d: \(UUID: MIG-", listed, re.M)) == 3
    assert "pynvml 39.5 9.75 9.75" in out
    assert "Disabled MIG Mode for GPU" in out and out.rstrip().endswith(")") and "MIG 1g" not in out.split(
        "Disabled MIG Mode")[1]
