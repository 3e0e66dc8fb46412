"""The fake nv-fabricmanager and its ctl, run as real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mokka_core.model.spec import NodeSpec
from mokka_core.schema.builtin import builtin_text
from mokka_core.stage import nodefile
from mokka_core.stage.store import FABRICMANAGER_READY
from mokka_core.stage.surface import StageContext
from mokka_core.testing.waiting import wait_for
from mokka_sim_fabricmanager.surface import FabricmanagerSurface


def start(root: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "mokka_sim_fabricmanager.daemon", "--root", str(root), *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def ctl(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mokka_sim_fabricmanager.ctl", "--root", str(root), *args],
                          capture_output=True, text=True, timeout=30)


def stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=10)
    return out


def test_ready_after_init_delay_and_clean_shutdown(tmp_path: Path) -> None:
    marker = tmp_path / FABRICMANAGER_READY
    proc = start(tmp_path, "--init-delay", "1.0", "-c", "/etc/fabricmanager.cfg")
    try:
        time.sleep(0.3)
        early = ctl(tmp_path, "-q")
        assert early.returncode == 1, early
        assert early.stderr.strip() == "fabric manager not ready"
        wait_for(marker.exists, what="the ready marker")
        ready = ctl(tmp_path, "-q")
        assert (ready.returncode, ready.stdout) == (0, "READY\n")
        marker.unlink()  # re-asserted while the daemon runs
        wait_for(marker.exists, what="the re-asserted ready marker")
    finally:
        out = stop(proc)
    assert proc.returncode == 0
    assert "clean shutdown" in out.splitlines()[-1]
    assert not marker.exists()
    assert ctl(tmp_path, "-q").returncode == 1


def test_failed_never_becomes_ready(tmp_path: Path) -> None:
    proc = start(tmp_path, "--failed")
    try:
        time.sleep(2.5)
        assert not (tmp_path / FABRICMANAGER_READY).exists()
        assert ctl(tmp_path, "-q").returncode == 1
    finally:
        out = stop(proc)
    assert "clean shutdown" in out


def test_stale_marker_of_a_killed_daemon_is_not_ready(tmp_path: Path) -> None:
    marker = tmp_path / FABRICMANAGER_READY
    proc = start(tmp_path)
    wait_for(marker.exists, what="the ready marker")
    proc.kill()
    proc.communicate(timeout=10)
    assert marker.exists()
    assert ctl(tmp_path, "-q").returncode == 1
    # a new daemon clears it before training again
    proc = start(tmp_path, "--failed")
    try:
        wait_for(lambda: not marker.exists(), what="the stale marker gone")
    finally:
        stop(proc)


def test_ctl_without_query_is_a_usage_error(tmp_path: Path) -> None:
    assert ctl(tmp_path).returncode == 2


@pytest.mark.parametrize("delay", ["-1", "soon"])
def test_bad_init_delay_is_refused_naming_the_option(tmp_path: Path, delay: str) -> None:
    result = subprocess.run([sys.executable, "-m", "mokka_sim_fabricmanager.daemon", "--root", str(tmp_path),
                             "--init-delay", delay], capture_output=True, text=True, timeout=30)
    assert result.returncode != 0
    assert "--init-delay" in result.stderr


@pytest.mark.parametrize("failed", [False, True])
def test_services_run_the_daemon(tmp_path: Path, failed: bool) -> None:
    node = NodeSpec(profile="gb200", surfaces={"fabricmanager": {"state": "failed" if failed else "healthy"}}).resolve()
    (service,) = FabricmanagerSurface().services(node, StageContext(root=tmp_path))
    assert service.name == "nv-fabricmanager"
    assert service.command[-1] == "--failed" if failed else "--failed" not in service.command
    proc = subprocess.Popen(service.command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        if failed:  # past this line the daemon only waits: a marker would be there by now
            assert proc.stdout is not None
            while "fabric training in progress" not in (line := proc.stdout.readline()):
                assert line, "the daemon exited"
            assert not (tmp_path / FABRICMANAGER_READY).exists()
        else:
            wait_for((tmp_path / FABRICMANAGER_READY).exists, what="the ready marker")
    finally:
        stop(proc)


def node_with_driver(root: Path, driver: str) -> None:
    text = builtin_text("h100")
    profile = root.parent / "profile.yaml"
    profile.write_text(text.replace('driver_version: "550.163.01"', f'driver_version: "{driver}"'))
    assert profile.read_text() != text, "the built-in h100 profile no longer names driver 550.163.01"
    nodefile.save(root, NodeSpec(profile_file=profile))


@pytest.mark.parametrize("flag", ["--version", "-v"])
def test_version_is_the_real_line_with_the_driver_of_the_node(tmp_path: Path, flag: str) -> None:
    root = tmp_path / "root"
    node_with_driver(root, "535.161.08")
    done = subprocess.run([sys.executable, "-m", "mokka_sim_fabricmanager.daemon", flag], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "MOKKA_ROOT": str(root)})
    # the real nv-fabricmanager of driver 535.161.08 (the line leptonai/gpud parses; NVIDIA forum transcripts)
    assert (done.returncode, done.stdout, done.stderr) == (0, "Fabric Manager version is : 535.161.08\n", "")
    assert not (root / FABRICMANAGER_READY).exists()  # it printed and exited: no daemon ran


def test_version_without_a_node_says_so(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "mokka_sim_fabricmanager.daemon", "--root", str(tmp_path),
                           "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith(f"nv-fabricmanager: no simulated node under {tmp_path}")
