"""What people expect of the command lines: --version everywhere, ``mokka node status`` says when there is no node."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mokka_core.cli.mokka import app
from mokka_core.node.runstate import READY, RunState, process_start_ticks
from mokka_core.node.status import status_table
from mokka_core.stage.store import NodeStore
from mokka_core.version import __version__

BIN = Path(sys.executable).parent
SIMS = ["gpu", "pci", "cdi", "imex", "nvlink", "fabricmanager", "ib"]


@pytest.mark.parametrize("program", ["mokka", "nvml-mock-ctl", "mokka-allocwatch", "mokka-nri"])
def test_mokka_core_commands_print_their_version(program: str) -> None:
    done = subprocess.run([str(BIN / program), "--version"], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, f"{program} {__version__}\n"), done.stderr


def test_the_mig_follower_prints_its_version() -> None:
    """A service `mokka run` starts as a module (``python -m mokka_core.node.follow``), not a console script."""
    done = subprocess.run([sys.executable, "-m", "mokka_core.node.follow", "--version"], capture_output=True,
                          text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, f"mokka-mig-follow {__version__}\n"), done.stderr


@pytest.mark.parametrize("sim", SIMS)
def test_each_sim_prints_its_own_version(sim: str) -> None:
    program = BIN / f"mokka-sim-{sim}"
    if not program.exists():
        pytest.skip(f"mokka-sim-{sim} is not installed")
    package = f"mokka_sim_{sim}"
    version = subprocess.run([sys.executable, "-c", f"import {package}.version as v; print(v.__version__)"],
                             capture_output=True, text=True, check=True).stdout.strip()
    done = subprocess.run([str(program), "--version"], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, f"mokka-sim-{sim} {version}\n"), done.stderr


@pytest.mark.parametrize("seconds", ["nan", "-1", "inf"])
def test_a_rest_after_that_is_not_seconds_is_a_usage_error(tmp_path: Path, seconds: str) -> None:
    """MOKKA_NODE_REST_AFTER=nan compared false with 0 and was taken as "never rest"."""
    result = CliRunner().invoke(app, ["node", "up", "--profile", "no-such-profile", "--root", str(tmp_path / "r")],
                                env={"MOKKA_NODE_REST_AFTER": seconds})
    assert result.exit_code == 2 and "rest-after" in result.output and f"got {float(seconds)}" in result.output
    assert not (tmp_path / "r").exists()


def test_node_down_by_a_user_who_may_not_stop_the_daemon_says_so(tmp_path: Path) -> None:
    """A non-root `mokka node down` of root's node ended in a PermissionError traceback."""
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root, to drop to another user")
    if subprocess.run([*as_nobody, sys.executable, "-c", "import mokka_core"], capture_output=True).returncode:
        pytest.skip("this interpreter or mokka_core is not readable by other users")
    root = Path(tempfile.mkdtemp(prefix="mokka-down-"))
    daemon = subprocess.Popen(["sleep", "60"])  # stands for root's daemon
    try:
        os.chmod(root, 0o755)
        RunState(pid=daemon.pid, start_ticks=process_start_ticks(daemon.pid), phase=READY).save(root)
        os.chmod(NodeStore(root).daemon_file, 0o644)
        done = subprocess.run([*as_nobody, sys.executable, "-m", "mokka_core", "node", "down",
                               "--root", str(root)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert f"daemon pid {daemon.pid} of uid 0" in done.stderr and "as its user or as root" in done.stderr
        assert daemon.poll() is None
    finally:
        daemon.kill()
        daemon.wait()
        shutil.rmtree(root)


def test_node_status_without_a_node_exits_1_with_a_message(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["node", "status", "--root", str(tmp_path)])
    assert result.exit_code == 1
    assert "no node: no simulated node under" in result.output and "Ready" not in result.output


def test_status_after_a_broken_edit_says_the_last_good_state_is_kept() -> None:
    report = {"root": "/r", "node": None, "error": "h100.yaml: device_defaults.power: bad", "ready": True,
              "daemon": {"pid": 7, "alive": True, "phase": "ready", "error": None}, "surfaces": {}}
    table = status_table(report)
    assert "Node keeps its last good state; its inputs no longer resolve: h100.yaml: device_defaults.power: bad" \
        in table
    assert "No node" not in table
