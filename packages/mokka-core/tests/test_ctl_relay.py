"""nvml-mock-ctl hands its command to the node daemon where one listens, and runs it itself otherwise.

What the user sees must not depend on which process ran the command: the same message, the same
exit status, the same node afterwards.  Where the daemon cannot take it (no daemon, a dead one's
socket, a declining one) the command runs in its own process; where the daemon took it and went
away, the user is told the change may or may not have landed.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from mokka_core.stage.store import NodeStore
from mokka_core.testing.runner import recording_node

CTL = [sys.executable, "-m", "mokka_core.ctl"]


def ctl(root: Path, *words: str, in_process: bool = False) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "MOKKA_CTL_IN_PROCESS"}
    if in_process:
        env["MOKKA_CTL_IN_PROCESS"] = "1"
    return subprocess.run([*CTL, "--root", str(root), *words], capture_output=True, text=True, timeout=60, env=env)


def test_the_daemon_runs_the_command_and_the_node_changes(tmp_path: Path) -> None:
    with recording_node(tmp_path) as relayed:
        assert NodeStore(tmp_path).ctl_socket.is_socket()
        done = ctl(tmp_path, "temp", "0", "91")
        assert (done.returncode, done.stdout, done.stderr) == (0, "ok: GPU 0 temperature 91 C\n", "")
        assert relayed == [["--root", str(tmp_path), "temp", "0", "91"]]
        status = json.loads(ctl(tmp_path, "status", "--json", in_process=True).stdout)
        assert status["gpus"][0]["temperature_c"] == 91
    assert not NodeStore(tmp_path).ctl_socket.exists()  # the daemon's teardown removes its socket


@pytest.mark.parametrize("words", [
    ("temp", "0", "91"),
    ("temp", "0", "555"),  # refused
    ("temp", "9", "50"),  # no such GPU
    ("bogus",),  # usage error
    ("temp", "--help"),
    ("status",),
    ("reset",),
])
def test_what_the_user_sees_does_not_depend_on_which_process_ran_it(tmp_path: Path, words: tuple[str, ...]) -> None:
    with recording_node(tmp_path) as relayed:
        relayed_run = ctl(tmp_path, *words)
        assert relayed, "the command was not relayed"
        here = ctl(tmp_path, *words, in_process=True)
    assert (relayed_run.returncode, relayed_run.stdout, relayed_run.stderr) == \
        (here.returncode, here.stdout, here.stderr)


def test_a_relative_or_abbreviated_root_reaches_the_same_daemon(tmp_path: Path) -> None:
    with recording_node(tmp_path / "node") as relayed:
        done = subprocess.run([*CTL, "--ro=node", "temp", "1", "70"], capture_output=True, text=True,
                              timeout=60, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        env = {**os.environ, "MOKKA_ROOT": "node"}
        done = subprocess.run([*CTL, "temp", "1", "71"], capture_output=True, text=True, timeout=60,
                              cwd=tmp_path, env=env)
        assert done.returncode == 0, done.stderr
        assert len(relayed) == 2
        assert json.loads(ctl(tmp_path / "node", "status", "--json").stdout)["gpus"][1]["temperature_c"] == 71


def listening(path: Path, answer: bytes | None) -> threading.Thread:
    """A fake daemon at ``path`` that reads one request and answers ``answer`` (None: closes unanswered)."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            while conn.recv(65536):
                pass
            if answer is not None:
                conn.sendall(answer)
        server.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def test_without_a_daemon_or_with_a_dead_ones_socket_the_command_runs_here(tmp_path: Path) -> None:
    from mokka_core import Node

    with Node(profile="t4") as here:
        root = here.root
        done = ctl(root, "temp", "0", "66")
        assert done.returncode == 0, done.stderr
        dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        dead.bind(str(NodeStore(root).ctl_socket))
        dead.close()  # bound, never listening: what a SIGKILLed daemon leaves
        done = ctl(root, "temp", "0", "67")
        assert (done.returncode, done.stdout) == (0, "ok: GPU 0 temperature 67 C\n"), done.stderr
        assert " 67C " in here.ctl("status")
        NodeStore(root).ctl_socket.unlink()


def test_a_declining_daemon_leaves_the_command_to_this_process(tmp_path: Path) -> None:
    from mokka_core import Node

    with Node(profile="t4") as here:
        thread = listening(NodeStore(here.root).ctl_socket, b"-1 0 0\n")
        done = ctl(here.root, "temp", "0", "68")
        thread.join(10)
        NodeStore(here.root).ctl_socket.unlink()
        assert (done.returncode, done.stdout) == (0, "ok: GPU 0 temperature 68 C\n"), done.stderr


@pytest.mark.parametrize("answer", [None, b"0 40 0\nok: cut short"], ids=["closed", "truncated"])
def test_a_daemon_that_took_the_command_and_went_away_is_reported(tmp_path: Path, answer: bytes | None) -> None:
    root = tmp_path / "root"
    NodeStore(root).dir.mkdir(parents=True)
    thread = listening(NodeStore(root).ctl_socket, answer)
    done = ctl(root, "temp", "0", "69")
    thread.join(10)
    assert done.returncode == 1
    assert "took the command but did not answer" in done.stderr
    assert "may or may not be applied" in done.stderr and f"--root {root} status" in done.stderr


def test_handing_a_command_over_imports_nothing_of_the_node_code(tmp_path: Path) -> None:
    root = tmp_path / "root"
    NodeStore(root).dir.mkdir(parents=True)
    thread = listening(NodeStore(root).ctl_socket, b"0 3 0\nok\n")
    code = ("import sys; from mokka_core.ctl import relay; status = relay.relay(sys.argv[1:]); "
            "heavy = sorted(m for m in ('argparse', 'pathlib', 'typing', 'json', 'socket', 'mokka_core.model', "
            "'mokka_core.stage.store', 'mokka_core.ctl.cli') if m in sys.modules); print(status, heavy)")
    done = subprocess.run([sys.executable, "-c", code, "--root", str(root), "temp", "0", "1"], capture_output=True,
                          text=True, timeout=60)
    thread.join(10)
    assert done.stdout.splitlines()[-1] == "0 []", done.stdout + done.stderr
