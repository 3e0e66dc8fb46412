"""The node's one log stream: every line prefixed with its source, whole wherever stdout goes; `mokka node logs`."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mokka_core.cli.mokka import app
from mokka_core.node.logstream import LogStream, read_node_log, source_of
from mokka_core.node.status import node_status
from mokka_core.node.supervise import SUPERVISORD_LOG, render_config
from mokka_core.stage.store import NodeStore
from mokka_core.stage.surface import Service
from mokka_core.testing.tree import tree_snapshot as snapshot
from mokka_core.testing.waiting import wait_for


def test_service_lines_are_forwarded_prefixed_across_a_rotation(root: Path) -> None:
    echo = io.StringIO()
    logs = LogStream(root, echo)
    logs.open()
    service_log = NodeStore(root).service_log("nv-fabricmanager")
    service_log.write_text("starting\nfabric tra")
    logs.write("mokka-node", "node up")
    wait_for(lambda: "[nv-fabricmanager] starting\n" in echo.getvalue(), what="the service's line forwarded")
    with open(service_log, "a") as out:
        out.write("ined\nbefore the rotation\n")
    service_log.rename(f"{service_log}.1")  # what supervisord does at logfile_maxbytes
    service_log.write_text("after the rotation\nno newline yet")
    logs.close()
    lines = NodeStore(root).node_log.read_text().splitlines()
    assert lines.index("[nv-fabricmanager] fabric trained") < lines.index("[nv-fabricmanager] before the rotation") \
        < lines.index("[nv-fabricmanager] after the rotation") < lines.index("[nv-fabricmanager] no newline yet")
    assert "[mokka-node] node up" in lines
    assert echo.getvalue().splitlines() == lines
    logs.write("mokka-node", "torn down")  # after close: the echo only, the node log is about to go
    assert echo.getvalue().endswith("[mokka-node] torn down\n") and "torn down" not in "\n".join(lines)


def test_the_node_log_is_rotated_at_its_cap_and_read_whole(root: Path, monkeypatch) -> None:
    from mokka_core.node import logstream

    monkeypatch.setattr(logstream, "NODE_LOG_MAX_BYTES", 100)
    logs = LogStream(root)
    logs.open()
    written = [f"line {n} " + "x" * 24 for n in range(5)]  # 40 bytes a line, prefix included
    for line in written:
        logs.write("mokka-node", line)
    logs.close()
    assert Path(f"{NodeStore(root).node_log}.1").read_text().count("\n") == 3
    assert list(read_node_log(root)) == [f"[mokka-node] {line}" for line in written]


def test_the_rpc_socket_takes_credentials_kept_in_the_private_config(root: Path) -> None:
    config = render_config(root, {"svc": Service(name="svc", command=["true"])}, password="0123abcd")
    assert "username=mokka\npassword=0123abcd" in config.split("[unix_http_server]")[1].split("[")[0]
    assert "/dev/stdout" not in config and "silent=true" in config
    assert f"logfile={NodeStore(root.absolute()).service_log(SUPERVISORD_LOG)}" in config
    with pytest.raises(Exception, match="reserved"):
        render_config(root, {"supervisord": Service(name="supervisord", command=["true"])}, password="x")


def start(root: Path, pid_dir: Path, stdout: int | io.IOBase) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "mokka_core.testing.runner", "--root", str(root), "--gpus", "2", "--service",
         str(pid_dir)], stdout=stdout, stderr=subprocess.STDOUT)


@pytest.mark.e2e
@pytest.mark.parametrize("stdout", ["file", "tty", "devnull"])
def test_node_log_is_whole_wherever_stdout_goes(root: Path, tmp_path: Path, stdout: str) -> None:
    """With stdout a regular file, supervisord reopened /dev/stdout at offset 0 and wrote over the daemon's lines."""
    before = snapshot(root)
    captured = tmp_path / "out.log"
    if stdout == "file":
        sink: int | io.IOBase = open(captured, "wb")  # `> file`: not O_APPEND  # noqa: SIM115
    elif stdout == "tty":
        sink, reader = os.openpty()
        tty: list[str] = []  # read all along: a full pty would block the daemon's writes
        reading = threading.Thread(target=lambda: tty.append(_drain_pty(reader)))
        reading.start()
    else:
        sink = subprocess.DEVNULL
    daemon = start(root, tmp_path / "pids", sink)
    try:
        wait_for(lambda: node_status(root)["ready"], what="node ready")
        wait_for(lambda: any("sleeping" in line for line in read_node_log(root, "mokka-test-sleeper")),
                 what="the service's line in the node log")
        runner = CliRunner()
        one = runner.invoke(app, ["node", "logs", "mokka-test-sleeper", "--root", str(root)])
        assert (one.exit_code, one.output) == (0, "[mokka-test-sleeper] mokka-test-sleeper: sleeping\n")
        unknown = runner.invoke(app, ["node", "logs", "nv-imex", "--root", str(root)])
        assert unknown.exit_code == 1
        assert "no service 'nv-imex'" in unknown.output
        assert "mokka-node, mokka-test-sleeper, supervisord" in unknown.output
        node_log = runner.invoke(app, ["node", "logs", "--root", str(root)]).output
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)
    assert daemon.returncode == 0
    assert snapshot(root) == before  # the log dir went with the node
    lines = node_log.splitlines()
    assert all(source_of(line) in ("mokka-node", "supervisord", "mokka-test-sleeper") for line in lines), lines
    assert lines[0].startswith("[mokka-node] node mokka-node: 2 GPU(s), published ")
    assert any(line.startswith("[supervisord] ") and "spawned: 'mokka-test-sleeper'" in line for line in lines)
    assert not any("authentication" in line or " CRIT " in line for line in lines), lines
    if stdout == "devnull":
        return
    if stdout == "file":
        sink.close()  # type: ignore[union-attr]
        out = captured.read_text()
    else:
        os.close(sink)  # type: ignore[arg-type]
        reading.join(timeout=10)
        out = tty[0]
    printed = out.splitlines()
    assert printed[: len(lines)] == lines  # what `node logs` printed, then the teardown's lines
    assert printed[-1].startswith("[mokka-node] node torn down"), out
    assert "\0" not in out


def _drain_pty(fd: int) -> str:
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the other side is closed and all is read
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks).decode().replace("\r\n", "\n")


def test_node_logs_without_a_node_exits_1_with_a_message(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["node", "logs", "--root", str(tmp_path)])
    assert result.exit_code == 1
    assert f"no node under {tmp_path}" in result.output
