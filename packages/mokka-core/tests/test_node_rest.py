"""The node daemon at rest: `mokka node up` execs a lean form of itself (same pid) and wakes it for work."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from mokka_core.model.spec import NodeSpec
from mokka_core.node import rest
from mokka_core.node.runstate import RunState
from mokka_core.node.settings import NodeSettings
from mokka_core.node.status import node_status
from mokka_core.node.supervise import alive, read_pid
from mokka_core.stage.native import native_dir
from mokka_core.stage.paths import LIB_DIR
from mokka_core.stage.store import NodeStore
from mokka_core.testing.processes import descendants
from mokka_core.testing.runner import DaemonRunner
from mokka_core.testing.tree import tree_snapshot as snapshot
from mokka_core.testing.waiting import wait_for

# real processes and a real supervisord, running the real surfaces' services (tox -e e2e)
pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("whole_node")]

BIN = Path(sys.executable).parent
TEMPERATURE = ("import pynvml; pynvml.nvmlInit(); "
               "print(pynvml.nvmlDeviceGetTemperature(pynvml.nvmlDeviceGetHandleByIndex(0), 0))")


def up(root: Path, out: IO[str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([str(BIN / "mokka"), "node", "up", "--profile", "h100", "--gpus", "2",
                             "--root", str(root), "--rest-after", "1", *args], stdout=out, stderr=subprocess.STDOUT,
                            text=True)


def resting(root: Path, pid: int) -> bool:
    state = RunState.load(root)
    try:
        program = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return state is not None and state.resting and any(arg.endswith(b"/node/rest.py") for arg in program)


def vm_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


def temperature(root: Path) -> int:
    done = subprocess.run([sys.executable, "-c", TEMPERATURE], capture_output=True, text=True, check=True,
                          env={**os.environ, "LD_LIBRARY_PATH": str(root / LIB_DIR)})
    return int(done.stdout)


def ctl(root: Path, *words: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "nvml-mock-ctl"), "--root", str(root), *words], capture_output=True,
                          text=True, timeout=120)


def loaded_by(code: str) -> set[str]:
    """The top-level modules ``code`` loads in a bare interpreter (``-I -S``, as the lean form runs)."""
    probe = ("import sys; before = set(sys.modules); " + code +
             "; print(' '.join(sorted({m.split('.')[0] for m in set(sys.modules) - before})))")
    return set(subprocess.run([sys.executable, "-I", "-S", "-c", probe], capture_output=True, text=True,
                              check=True).stdout.split())


def test_the_lean_form_imports_only_standard_library_basics() -> None:
    lean = loaded_by(f"exec(compile(open({rest.__file__!r}).read(), {rest.__file__!r}, 'exec'), "
                     f"{{'__name__': 'probe', '__file__': {rest.__file__!r}}})")
    basics = loaded_by("import contextlib, json, os, select, signal, sys, time")
    assert lean - basics == {"tail", "__future__"}, lean - basics  # its one sibling, on the standard library too
    assert not lean & {"mokka_core", "logging", "threading", "pathlib", "socket", "subprocess", "typing",
                       "dataclasses", "pydantic", "typer", "watchdog", "supervisor", "yaml"}


def test_a_daemon_run_from_a_thread_never_rests(tmp_path: Path) -> None:
    root = tmp_path / "root"
    settings = NodeSettings(root=root, spec=NodeSpec(profile="h100", gpus=1), supervise=False, rest_after_s=0.05)
    with DaemonRunner(settings):
        time.sleep(0.5)
        state = RunState.load(root)
        assert state is not None and state.phase == "ready" and not state.resting


Node = tuple["subprocess.Popen[str]", dict[str, str]]


@pytest.fixture
def node(root: Path, tmp_path: Path) -> Iterator[Node]:
    """A ready `mokka node up` process (rest after 1 s, its output in out.log) and the root's picture before it."""
    before = snapshot(root)
    with open(tmp_path / "out.log", "w") as out:
        daemon = up(root, out)
        try:
            wait_for(lambda: node_status(root)["ready"], timeout=60, what="node ready")
            yield daemon, before
        finally:
            if daemon.poll() is None:
                daemon.kill()
                daemon.wait(30)
                subprocess.run([str(BIN / "mokka"), "node", "down", "--root", str(root)], capture_output=True)


def test_resting_keeps_the_pid_the_services_and_readiness_in_a_few_mb(root: Path, node: Node, tmp_path: Path) -> None:
    daemon, before = node
    supervisord = read_pid(root)
    services = [pid for pid in descendants(daemon.pid) if pid != supervisord]
    wait_for(lambda: resting(root, daemon.pid), what="the daemon at rest")
    assert daemon.poll() is None
    state = RunState.load(root)
    assert state is not None and state.pid == daemon.pid and state.daemon_alive()
    assert vm_rss_kib(daemon.pid) < 15 * 1024
    assert supervisord is not None and alive(supervisord) and set(services) <= set(descendants(daemon.pid))
    assert len(services) >= 3  # mokka-kmsg, nv-fabricmanager, the ib responder
    status = subprocess.run([str(BIN / "mokka"), "node", "status", "--root", str(root), "--ready"],
                            capture_output=True, text=True)
    assert status.returncode == 0, status.stdout + status.stderr
    assert "at rest" in subprocess.run([str(BIN / "mokka"), "node", "status", "--root", str(root)],
                                       capture_output=True, text=True).stdout
    assert resting(root, daemon.pid)  # the status asked supervisord, not the daemon
    daemon.send_signal(signal.SIGTERM)
    assert daemon.wait(60) == 0, (tmp_path / "out.log").read_text()
    assert not any(alive(pid) for pid in [supervisord, *services])
    assert snapshot(root) == before, (tmp_path / "out.log").read_text()
    out = (tmp_path / "out.log").read_text()
    assert "awake (pid" in out and "stopping (SIGTERM)" in out and "node torn down" in out


def test_work_wakes_the_daemon_which_does_it_and_rests_again(root: Path, node: Node, tmp_path: Path) -> None:
    pytest.importorskip("pynvml")
    if native_dir() is None:
        pytest.skip("mock libnvidia-ml not built (make -C native install)")
    daemon, before = node
    wait_for(lambda: resting(root, daemon.pid), what="the daemon at rest")
    # a ctl command: the client waits on the socket while the daemon comes back, and gets its answer
    done = ctl(root, "temp", "0", "77")
    assert done.returncode == 0 and "77" in done.stdout, done.stdout + done.stderr
    assert temperature(root) == 77
    state = RunState.load(root)
    assert state is not None and state.pid == daemon.pid
    wait_for(lambda: resting(root, daemon.pid), what="at rest again")
    # a file edited by hand: the lean form sees it change, the daemon renders it
    override = NodeStore(root).override_file
    override.write_text(override.read_text().replace("temperature_gpu_c: 77", "temperature_gpu_c: 66"))
    wait_for(lambda: temperature(root) == 66, what="the edited override rendered")
    wait_for(lambda: resting(root, daemon.pid), what="at rest again")
    # a service's lines written while the node rests reach the node log once, a line cut in two included
    service_log = NodeStore(root).service_log("nv-fabricmanager")
    with open(service_log, "a") as log:
        log.write("written at rest\nhalf a ")
    wait_for(lambda: "[nv-fabricmanager] written at rest" in NodeStore(root).node_log.read_text(),
             what="a line written at rest forwarded")
    assert ctl(root, "temp", "0", "55").returncode == 0  # awake: the rest of the line is forwarded from here
    with open(service_log, "a") as log:
        log.write("line\n")
    wait_for(lambda: "[nv-fabricmanager] half a line" in NodeStore(root).node_log.read_text(),
             what="the line completed awake")
    wait_for(lambda: resting(root, daemon.pid), what="at rest again")
    logs = subprocess.run([str(BIN / "mokka"), "node", "logs", "nv-fabricmanager", "--root", str(root)],
                          capture_output=True, text=True, check=True).stdout.splitlines()
    assert logs.count("[nv-fabricmanager] written at rest") == 1 and logs.count("[nv-fabricmanager] half a line") == 1
    assert sum("fabric trained" in line for line in logs) == 1, logs  # nothing forwarded twice across the execs
    daemon.send_signal(signal.SIGTERM)
    assert daemon.wait(60) == 0, (tmp_path / "out.log").read_text()
    assert snapshot(root) == before


def test_sigkill_of_the_resting_daemon_takes_supervisord_and_the_services_down(root: Path, node: Node) -> None:
    daemon, before = node
    wait_for(lambda: resting(root, daemon.pid), what="the daemon at rest")
    processes = descendants(daemon.pid)
    assert len(processes) >= 4
    daemon.kill()
    daemon.wait(10)
    wait_for(lambda: not any(alive(pid) for pid in processes), what="supervisord and the services gone")
    done = subprocess.run([str(BIN / "mokka"), "node", "down", "--root", str(root)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert snapshot(root) == before


def test_supervisord_gone_while_resting_wakes_the_daemon_which_says_so(root: Path, node: Node,
                                                                        tmp_path: Path) -> None:
    daemon, before = node
    wait_for(lambda: resting(root, daemon.pid), what="the daemon at rest")
    supervisord = read_pid(root)
    assert supervisord is not None
    os.kill(supervisord, signal.SIGTERM)  # it stops its services and exits: the lean form reaps it
    wait_for(lambda: "supervisord is gone" in (tmp_path / "out.log").read_text(), what="the daemon woken")
    wait_for(lambda: resting(root, daemon.pid), what="at rest again")
    assert not node_status(root)["ready"]
    daemon.send_signal(signal.SIGTERM)
    assert daemon.wait(60) == 0, (tmp_path / "out.log").read_text()
    assert snapshot(root) == before, (tmp_path / "out.log").read_text()


@pytest.mark.parametrize("delay_ms", [0, 150, 300, 450, 600])
def test_sigterm_around_the_exec_into_rest_is_never_lost(root: Path, tmp_path: Path, delay_ms: int) -> None:
    """A stop signal taken while the daemon hands over and execs (or while the lean form starts) stays pending."""
    before = snapshot(root)
    with open(tmp_path / "out.log", "w") as out:
        daemon = up(root, out, "--rest-after", "0.3")  # the last --rest-after counts
        wait_for(lambda: node_status(root)["ready"], timeout=60, what="node ready")
        time.sleep(delay_ms / 1000)
        daemon.send_signal(signal.SIGTERM)
        try:
            assert daemon.wait(60) == 0, (tmp_path / "out.log").read_text()
        finally:
            if daemon.poll() is None:
                daemon.kill()
                daemon.wait(10)
    assert snapshot(root) == before, (tmp_path / "out.log").read_text()
