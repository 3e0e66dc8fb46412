"""The fake nv-fabricmanager (the native program supervisord runs, and the command that execs it) and its ctl,
run as real processes."""

from __future__ import annotations

import ctypes
import os
import select
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mokka_core.errors import MokkaError
from mokka_core.model.spec import NodeSpec
from mokka_core.schema.builtin import builtin_text
from mokka_core.stage import nodefile
from mokka_core.stage.store import FABRICMANAGER_READY, write_temps
from mokka_core.stage.surface import StageContext
from mokka_core.testing.consumers import missing
from mokka_core.testing.waiting import wait_for
from mokka_sim_fabricmanager.daemon import binary
from mokka_sim_fabricmanager.surface import FabricmanagerSurface

IN_CREATE, IN_MOVED_TO = 0x100, 0x80
#: the command this package installs (execs the native daemon; answers --version itself)
COMMAND = Path(sys.executable).parent / "nv-fabricmanager"


@pytest.fixture(scope="module")
def daemon() -> Path:
    try:
        return binary()
    except MokkaError as exc:
        missing(str(exc))


def start(daemon: Path, root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([str(daemon), "--root", str(root), *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def ctl(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mokka_sim_fabricmanager.ctl", "--root", str(root), *args],
                          capture_output=True, text=True, timeout=30)


def stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=10)
    return out


def test_ready_after_init_delay_and_clean_shutdown(tmp_path: Path, daemon: Path) -> None:
    marker = tmp_path / FABRICMANAGER_READY
    proc = start(daemon, tmp_path, "--init-delay", "1.0", "-c", "/etc/fabricmanager.cfg")
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
    assert out.splitlines() == [
        f"nv-fabricmanager: starting (root {tmp_path}, init delay 1s)",
        f"nv-fabricmanager: fabric trained; ready ({marker})",
        "nv-fabricmanager: clean shutdown",
    ]
    assert not marker.exists()
    assert write_temps(marker.parent) == []
    assert ctl(tmp_path, "-q").returncode == 1


def test_marker_is_the_pid_written_whole_and_readable_by_all(tmp_path: Path, daemon: Path) -> None:
    marker = tmp_path / FABRICMANAGER_READY
    proc = start(daemon, tmp_path, env={**os.environ, "MOKKA_FABRICMANAGER_INIT_DELAY_SEC": "0.2"})
    try:
        wait_for(marker.exists, what="the ready marker")
        assert marker.read_text() == f"{proc.pid}\n"
        assert marker.stat().st_mode & 0o777 == 0o644
        assert write_temps(marker.parent) == []  # renamed over the marker: no temp left beside it
    finally:
        out = stop(proc)
    assert "init delay 0.2s" in out.splitlines()[0]


def created_names(directory: Path, until: str, timeout: float = 30) -> list[str]:
    """Names created or renamed into ``directory`` (inotify) up to the rename that makes ``until``."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_CLOEXEC)
    assert fd >= 0 and libc.inotify_add_watch(fd, str(directory).encode(), IN_CREATE | IN_MOVED_TO) >= 0
    names: list[str] = []
    try:
        deadline = time.monotonic() + timeout
        while until not in names:
            assert select.select([fd], [], [], max(0, deadline - time.monotonic()))[0], f"no {until} in {names}"
            data = os.read(fd, 65536)
            while data:  # struct inotify_event: wd, mask, cookie, len, then len bytes of name
                _wd, _mask, _cookie, size = struct.unpack_from("iIII", data)
                names.append(data[16:16 + size].rstrip(b"\0").decode())
                data = data[16 + size:]
    finally:
        os.close(fd)
    return names


def test_marker_is_written_through_a_temp_teardown_recognises(tmp_path: Path, daemon: Path) -> None:
    """A daemon killed between writing and renaming leaves a temp that teardown's ``write_temps`` removes."""
    marker = tmp_path / FABRICMANAGER_READY
    marker.parent.mkdir(parents=True)
    proc = start(daemon, tmp_path, "--init-delay", "0.5")
    try:
        names = created_names(marker.parent, marker.name)
    finally:
        stop(proc)
    (temp,) = names[:-1]
    assert temp.startswith(".fabricmanager.ready.") and temp.endswith(".tmp"), names
    (marker.parent / temp).write_text("")  # as a kill before the rename would leave it
    assert write_temps(marker.parent) == [marker.parent / temp]


def test_a_marker_path_in_the_way_is_an_error_naming_it(tmp_path: Path, daemon: Path) -> None:
    marker = tmp_path / FABRICMANAGER_READY
    (marker / "in-the-way").mkdir(parents=True)  # the marker's path is a folder that is not empty
    proc = start(daemon, tmp_path)
    out, _ = proc.communicate(timeout=30)
    assert (proc.returncode, out) == (1, f"nv-fabricmanager: cannot remove {marker}: Is a directory\n")
    assert (marker / "in-the-way").is_dir()


def test_sigint_is_a_clean_shutdown_during_the_init_delay(tmp_path: Path, daemon: Path) -> None:
    proc = start(daemon, tmp_path / "node/", "--init-delay", "inf")
    assert proc.stdout is not None
    assert proc.stdout.readline() == f"nv-fabricmanager: starting (root {tmp_path / 'node'}, init delay infs)\n"
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=10)
    assert (proc.returncode, out) == (0, "nv-fabricmanager: clean shutdown\n")
    assert not (tmp_path / "node" / FABRICMANAGER_READY).exists()


def test_the_daemon_at_rest_is_small(tmp_path: Path, daemon: Path) -> None:
    """Issue 21 (a node at rest is cheap): the Python daemon it replaced was 13 MB resident."""
    proc = start(daemon, tmp_path)
    try:
        wait_for((tmp_path / FABRICMANAGER_READY).exists, what="the ready marker")
        status = Path(f"/proc/{proc.pid}/status").read_text()
        rss_kib = int(next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1])
        assert rss_kib < 2048, f"nv-fabricmanager at rest: {rss_kib} KiB resident"
    finally:
        stop(proc)


def test_failed_never_becomes_ready(tmp_path: Path, daemon: Path) -> None:
    proc = start(daemon, tmp_path, "--failed")
    try:
        time.sleep(2.5)
        assert not (tmp_path / FABRICMANAGER_READY).exists()
        assert ctl(tmp_path, "-q").returncode == 1
    finally:
        out = stop(proc)
    assert out.splitlines() == [
        f"nv-fabricmanager: starting (root {tmp_path}, init delay 0s, failed: fabric never trains)",
        "nv-fabricmanager: fabric training in progress",
        "nv-fabricmanager: clean shutdown",
    ]


def test_stale_marker_of_a_killed_daemon_is_not_ready(tmp_path: Path, daemon: Path) -> None:
    marker = tmp_path / FABRICMANAGER_READY
    proc = start(daemon, tmp_path)
    wait_for(marker.exists, what="the ready marker")
    proc.kill()
    proc.communicate(timeout=10)
    assert marker.exists()
    assert ctl(tmp_path, "-q").returncode == 1
    # a new daemon clears it before training again
    proc = start(daemon, tmp_path, "--failed")
    try:
        wait_for(lambda: not marker.exists(), what="the stale marker gone")
    finally:
        stop(proc)


def test_ctl_without_query_is_a_usage_error(tmp_path: Path) -> None:
    assert ctl(tmp_path).returncode == 2


@pytest.mark.parametrize(("delay", "message"), [
    ("-1", "nv-fabricmanager: --init-delay must not be negative, got '-1'"),
    ("soon", "nv-fabricmanager: --init-delay must be a number of seconds, got 'soon'"),
    ("nan", "nv-fabricmanager: --init-delay must be a number of seconds, got 'nan'"),
])
def test_bad_init_delay_is_refused_naming_the_option(tmp_path: Path, daemon: Path, delay: str, message: str) -> None:
    result = subprocess.run([str(daemon), "--root", str(tmp_path), "--init-delay", delay],
                            capture_output=True, text=True, timeout=30)
    assert (result.returncode, result.stdout, result.stderr) == (1, "", message + "\n")


def test_bad_init_delay_from_the_environment_is_refused_naming_it(tmp_path: Path, daemon: Path) -> None:
    env = {**os.environ, "MOKKA_FABRICMANAGER_INIT_DELAY_SEC": "2s"}
    result = subprocess.run([str(daemon), "--root", str(tmp_path)], capture_output=True, text=True, timeout=30, env=env)
    assert result.returncode == 1
    assert result.stderr == ("nv-fabricmanager: MOKKA_FABRICMANAGER_INIT_DELAY_SEC must be a number of seconds,"
                             " got '2s'\n")


@pytest.mark.parametrize("args", [["--no-such-option"], ["--root"], ["extra"]])
def test_usage_errors_exit_2(tmp_path: Path, daemon: Path, args: list[str]) -> None:
    result = subprocess.run([str(daemon), *args], capture_output=True, text=True, timeout=30,
                            env={**os.environ, "MOKKA_ROOT": str(tmp_path)})
    assert result.returncode == 2 and result.stderr.startswith("usage: nv-fabricmanager ")
    assert not (tmp_path / FABRICMANAGER_READY).parent.exists()


def test_root_from_the_environment(tmp_path: Path, daemon: Path) -> None:
    proc = subprocess.Popen([str(daemon)], env={**os.environ, "MOKKA_ROOT": str(tmp_path)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for((tmp_path / FABRICMANAGER_READY).exists, what="the ready marker under $MOKKA_ROOT")
    finally:
        stop(proc)


def test_help_shows_a_real_example_that_runs(tmp_path: Path, daemon: Path) -> None:
    done = subprocess.run([str(COMMAND), "--help"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and done.stderr == ""
    example = next(line for line in done.stdout.splitlines() if line.startswith("Example: "))
    words = example.removeprefix("Example: ").split()
    assert words[0] == "nv-fabricmanager"
    words[words.index("--root") + 1] = str(tmp_path)
    proc = start(daemon, tmp_path, *words[1:])
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith(f"nv-fabricmanager: starting (root {tmp_path}, init delay ")
    finally:
        stop(proc)


@pytest.mark.parametrize("failed", [False, True])
def test_services_run_the_daemon(tmp_path: Path, daemon: Path, failed: bool) -> None:
    node = NodeSpec(profile="gb200", surfaces={"fabricmanager": {"state": "failed" if failed else "healthy"}}).resolve()
    (service,) = FabricmanagerSurface().services(node, StageContext(root=tmp_path))
    assert service.name == "nv-fabricmanager"
    assert service.command[:3] == [str(daemon), "--root", str(tmp_path)]
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
    done = subprocess.run([str(COMMAND), "--init-delay", "1", flag], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "MOKKA_ROOT": str(root)})
    # the real nv-fabricmanager of driver 535.161.08 (the line leptonai/gpud parses; NVIDIA forum transcripts)
    assert (done.returncode, done.stdout, done.stderr) == (0, "Fabric Manager version is : 535.161.08\n", "")
    assert not (root / FABRICMANAGER_READY).exists()  # it printed and exited: no daemon ran


def test_version_without_a_node_says_so(tmp_path: Path) -> None:
    done = subprocess.run([str(COMMAND), "--root", str(tmp_path), "--version"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith(f"nv-fabricmanager: no simulated node under {tmp_path}")


def test_the_native_program_sends_version_to_the_command(tmp_path: Path, daemon: Path) -> None:
    """The version is the node's driver's (its profile resolved): the package's command answers it, not the binary."""
    done = subprocess.run([str(daemon), "--root", str(tmp_path), "-v"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "mokka-sim-fabricmanager's nv-fabricmanager" in done.stderr
