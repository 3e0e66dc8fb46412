"""The daemon as a process: SIGTERM while staging or serving, SIGKILL then `mokka node down`, readiness."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mokka_core.cli.mokka import app
from mokka_core.node.runstate import RunState
from mokka_core.node.status import node_status
from mokka_core.node.supervise import alive, read_pid
from mokka_core.stage.layout import RUN_DIR, STATE_DIR
from mokka_core.testing.consumers import missing
from mokka_core.testing.runner import PROBE_FILE
from mokka_core.testing.tree import tree_snapshot as snapshot
from mokka_core.testing.waiting import wait_for

pytestmark = pytest.mark.e2e  # real processes and a real supervisord


def start(root: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "mokka_core.testing.runner", "--root", str(root), "--gpus", "2", *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def sleeper_pid(pid_dir: Path) -> int:
    path = pid_dir / "mokka-test-sleeper.pid"
    wait_for(lambda: path.exists() and path.read_text().strip() != "", what="service started")
    return int(path.read_text())


def test_sigterm_while_staging_publishes_nothing(root: Path) -> None:
    before = snapshot(root)
    daemon = start(root, "--slow", "1.5")
    wait_for(lambda: RunState.load(root) is not None, what="daemon claimed the root")
    daemon.send_signal(signal.SIGTERM)
    out, _ = daemon.communicate(timeout=20)
    assert daemon.returncode == 0, out
    assert snapshot(root) == before, out


def test_sigterm_twice_while_serving_tears_down_services_and_files(root: Path, tmp_path: Path) -> None:
    before = snapshot(root)
    daemon = start(root, "--service", str(tmp_path))
    service = sleeper_pid(tmp_path)
    wait_for(lambda: node_status(root)["ready"], what="node ready")
    supervisord = read_pid(root)
    assert (root / PROBE_FILE).exists()
    daemon.send_signal(signal.SIGTERM)
    time.sleep(0.05)
    daemon.send_signal(signal.SIGTERM)  # interrupted again: teardown still completes
    out, _ = daemon.communicate(timeout=30)
    assert daemon.returncode == 0, out
    assert not alive(service) and supervisord is not None and not alive(supervisord)
    assert snapshot(root) == before, out
    assert "mokka-test-sleeper" in out  # service logs reach the daemon's stdout via supervisord


def test_sigkill_then_node_down_cleans_everything(root: Path, tmp_path: Path) -> None:
    before = snapshot(root)
    daemon = start(root, "--service", str(tmp_path))
    service = sleeper_pid(tmp_path)
    wait_for(lambda: node_status(root)["ready"], what="node ready")
    daemon.kill()
    daemon.communicate(timeout=10)
    assert not node_status(root)["ready"]
    result = CliRunner().invoke(app, ["node", "down", "--root", str(root)])
    assert result.exit_code == 0, result.output
    wait_for(lambda: not alive(service), timeout=10, what="service gone")
    assert snapshot(root) == before


def test_node_down_stops_a_running_daemon(root: Path) -> None:
    before = snapshot(root)
    daemon = start(root)
    wait_for(lambda: node_status(root)["ready"], what="node ready")
    result = CliRunner().invoke(app, ["node", "down", "--root", str(root)])
    assert result.exit_code == 0, result.output
    daemon.communicate(timeout=10)
    assert daemon.returncode == 0
    assert snapshot(root) == before


def test_broken_surface_exits_non_zero_naming_it(root: Path) -> None:
    before = snapshot(root)
    daemon = start(root, "--broken")
    out, _ = daemon.communicate(timeout=30)
    assert daemon.returncode == 1
    assert "surface broken: plan failed" in out
    assert snapshot(root) == before


def test_status_ready_probe(root: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["node", "status", "--root", str(root), "--ready"]).exit_code == 1
    daemon = start(root, "--service", str(tmp_path))
    try:
        sleeper_pid(tmp_path)
        wait_for(lambda: runner.invoke(app, ["node", "status", "--root", str(root), "--ready"]).exit_code == 0,
                 what="status --ready")
        result = runner.invoke(app, ["node", "status", "--root", str(root), "--json"])
        assert '"mokka-test-sleeper": "RUNNING"' in result.output
        table = runner.invoke(app, ["node", "status", "--root", str(root)]).output
        assert "Ready: yes" in table
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.communicate(timeout=30)


@pytest.mark.parametrize("by", ["hand", "nvml-mock-ctl"])
def test_surface_disable_and_enable_reconcile_supervised_services(root: Path, tmp_path: Path, by: str) -> None:
    """By hand the daemon renders the change; nvml-mock-ctl renders it itself and the daemon only follows."""
    from mokka_core.ctl.cli import execute
    from mokka_core.model.spec import NodeSpec
    from mokka_core.node.settings import NodeSettings
    from mokka_core.stage.store import OVERRIDE_FILE
    from mokka_core.testing.runner import DaemonRunner, ServiceSurface

    pid_dir = tmp_path / "pids"
    settings = NodeSettings(root=root, spec=NodeSpec(profile="h100", gpus=2))
    surfaces = {"fabricmanager": ServiceSurface(pid_dir)}

    def switch(enabled: bool) -> None:
        if by == "hand":
            (root / OVERRIDE_FILE).write_text(f"surfaces: {{fabricmanager: {{enabled: {str(enabled).lower()}}}}}\n")
        else:
            verb = "enable" if enabled else "disable"
            assert execute(["--root", str(root), verb, "fabricmanager"], surfaces=surfaces) == 0

    with DaemonRunner(settings, surfaces):
        first = sleeper_pid(pid_dir)
        (pid_dir / "mokka-test-sleeper.pid").unlink()
        switch(False)
        wait_for(lambda: not alive(first), what="service stopped with its surface")
        assert not (root / "etc/mokka-service/enabled").exists()
        switch(True)
        second = sleeper_pid(pid_dir)
        assert second != first and alive(second)
        wait_for(lambda: node_status(root)["ready"], what="ready again")
    assert not alive(second)


@pytest.mark.parametrize("profile", ["h100", "t4"])  # t4: no fabric manager, whose surface stages run/
def test_mokka_node_up_cli_with_the_installed_surfaces(root: Path, profile: str) -> None:
    before = snapshot(root)
    mokka = Path(sys.executable).with_name("mokka")
    daemon = subprocess.Popen([str(mokka), "node", "up", "--profile", profile, "--gpus", "2", "--root", str(root)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: CliRunner().invoke(app, ["node", "status", "--root", str(root), "--ready"]).exit_code == 0,
                 timeout=60, what="mokka node status --ready")
        assert (root / "var/lib/mokka/node.json").exists()
    finally:
        daemon.send_signal(signal.SIGTERM)
        out, _ = daemon.communicate(timeout=60)
    assert daemon.returncode == 0, out
    assert snapshot(root) == before, out


SLOW_PUBLISH = """
import sys, time
from pathlib import Path
from mokka_core.model.spec import NodeSpec
from mokka_core.node.daemon import run
from mokka_core.node.foreground import foreground
from mokka_core.node.settings import NodeSettings
from mokka_core.stage import staging
from mokka_core.stage.surface import File, Surface, Symlink
from mokka_core.testing.runner import ProbeSurface

move = staging._move_into_place
def slow_move(*args):  # every publish step takes 4 ms: a SIGKILL lands in the middle of a wave
    time.sleep(0.004)
    move(*args)
staging._move_into_place = slow_move

class Tree(Surface):
    name = "tree"
    def plan(self, node, ctx):
        files = [File(f"sys/mokka-tree/d{i // 8}/e{i % 4}/f{i}", f"{i}\\n") for i in range(64)]
        return files + [Symlink("sys/mokka-tree/link", "d0/e0/f0")]

settings = NodeSettings(root=Path(sys.argv[1]), spec=NodeSpec(profile="h100", gpus=2), supervise=False)
print("starting", flush=True)
sys.exit(foreground("mokka-node", lambda stop, ready: run(settings, stop, ready, {"probe": ProbeSurface(),
                                                                                  "tree": Tree()}),
                    errors=(Exception,)))
"""


@pytest.mark.parametrize("delay_ms", [150, 250, 330, 420, 510])
def test_sigkill_at_any_point_of_staging_then_down_leaves_nothing(root: Path, delay_ms: int) -> None:
    """SIGKILL of `mokka node up` while it staged left a partial tree and a .mokka-stage-* directory."""
    before = snapshot(root)
    daemon = subprocess.Popen([sys.executable, "-c", SLOW_PUBLISH, str(root)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    assert daemon.stdout is not None and daemon.stdout.readline() == "starting\n"
    time.sleep(delay_ms / 1000)
    daemon.kill()
    daemon.communicate(timeout=10)
    result = CliRunner().invoke(app, ["node", "down", "--root", str(root)])
    assert result.exit_code == 0, result.output
    assert snapshot(root) == before


def test_down_removes_the_temp_file_of_a_write_killed_before_its_rename(root: Path) -> None:
    """CI: a SIGKILL between atomic_write's temp file and its rename left var/lib/mokka/.node.json.<hex>.tmp."""
    before = snapshot(root)
    daemon = subprocess.Popen([sys.executable, "-c", SLOW_PUBLISH, str(root)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    assert daemon.stdout is not None and daemon.stdout.readline() == "starting\n"
    wait_for(lambda: (root / STATE_DIR).is_dir(), what="the state dir")
    daemon.kill()
    daemon.communicate(timeout=10)
    (root / STATE_DIR / ".node.json.0123456789ab.tmp").write_text("")
    (root / RUN_DIR).mkdir(exist_ok=True)
    (root / RUN_DIR / ".kmsg.pid.ba9876543210.tmp").write_text("1\n")
    result = CliRunner().invoke(app, ["node", "down", "--root", str(root)])
    assert result.exit_code == 0, result.output
    assert snapshot(root) == before


def test_the_next_up_removes_what_a_sigkilled_up_left(root: Path) -> None:
    before = snapshot(root)
    for attempt in range(2):
        daemon = subprocess.Popen([sys.executable, "-c", SLOW_PUBLISH, str(root)], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
        assert daemon.stdout is not None and daemon.stdout.readline() == "starting\n"
        if attempt == 0:
            time.sleep(0.33)
            daemon.kill()
            daemon.communicate(timeout=10)
            continue
        wait_for(lambda: node_status(root)["ready"], what="node ready")
        assert not list(root.glob(".mokka-stage-*"))
        daemon.terminate()
        daemon.communicate(timeout=20)
    assert snapshot(root) == before


def test_node_up_on_a_read_only_root_is_a_message(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        missing("mounts a read-only tmpfs (root; CI runs as root)")
    root = tmp_path / "ro"
    root.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m,mode=755", "tmpfs", str(root)], check=True)
    try:
        done = subprocess.run([sys.executable, "-m", "mokka_core", "node", "up", "--root", str(root), "--profile",
                               "t4"], capture_output=True, text=True, timeout=60)
    finally:
        subprocess.run(["umount", str(root)], check=True)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "the root must be writable" in done.stderr and "Traceback" not in done.stderr, done.stderr
