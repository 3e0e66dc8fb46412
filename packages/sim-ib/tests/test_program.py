"""mokka-ib-responder as a program: one runs per node at rest, so it is small, static and quick to serve;
its options and their errors (the Python service it replaced: 13 MB resident, ~50 ms to its socket)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from mokka_sim_ib.responder import binary, command
from mokka_sim_ib.testing import stage_node, start_responder, stop_responder


def test_it_is_a_static_program() -> None:
    """No loader, no shared libraries: nothing to resolve at start-up (ELF without a PT_INTERP header)."""
    elf = binary().read_bytes()
    assert elf[:4] == b"\x7fELF" and elf[4] == 2  # 64-bit
    phoff, phentsize, phnum = int.from_bytes(elf[32:40], "little"), elf[54], int.from_bytes(elf[56:58], "little")
    kinds = {int.from_bytes(elf[phoff + i * phentsize:phoff + i * phentsize + 4], "little") for i in range(phnum)}
    assert 3 not in kinds  # PT_INTERP


def test_at_rest_it_is_small_and_serves_within_milliseconds(tmp_path: Path) -> None:
    node = stage_node(tmp_path / "n", "node-a", gpus=8)
    began = time.monotonic()
    start_responder(node, tmp_path / "fabric")
    took = time.monotonic() - began
    try:
        assert node.process is not None
        status = Path(f"/proc/{node.process.pid}/status").read_text()
        rss_kib = int(next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1])
        assert rss_kib < 2048, f"mokka-ib-responder at rest: {rss_kib} KiB resident"
        assert took < 1.0, f"{took * 1000:.0f} ms to its socket"  # a few ms; generous for a loaded CI machine
    finally:
        stop_responder(node)


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(binary()), *args], capture_output=True, text=True, timeout=10,
                          env={**os.environ, **(env or {})})


def test_help_names_every_option() -> None:
    result = run("--help")
    assert result.returncode == 0 and result.stdout.startswith("usage: mokka-ib-responder --node-file PATH")
    for option in ("--socket", "--listen", "--fabric-dir", "--peer", "MOKKA_IB_LISTEN", "MOKKA_IB_FABRIC_DIR",
                   "MOKKA_IB_PEERS", "MOKKA_IB_SOCKET_GROUP"):
        assert option in result.stdout


@pytest.mark.parametrize(("args", "env", "said"), [
    (["--bogus"], {}, "bad option --bogus"),
    (["--node-file", "x"], {}, "missing --socket"),
    (["--node-file", "x", "--socket", "y", "stray"], {}, "unexpected argument stray"),
    (["--node-file", "x", "--socket", "y", "--peer", "nowhere"], {},
     "expected HOST:PORT (at most 64 peers), got nowhere"),
    (["--node-file", "x", "--socket", "y", "--listen", "h:99999"], {}, "expected HOST:PORT, got h:99999"),
    (["--node-file", "x", "--socket", "y"], {"MOKKA_IB_PEERS": "a:1,b"},
     "MOKKA_IB_PEERS: expected HOST:PORT (at most 64 peers), got b"),
])
def test_usage_errors_exit_2_saying_what_is_wrong(args: list[str], env: dict[str, str], said: str) -> None:
    result = run(*args, env=env)
    assert result.returncode == 2 and result.stderr.startswith(f"mokka-ib-responder: {said}\nusage: ")


def test_options_take_both_forms_and_the_environment(tmp_path: Path) -> None:
    node = stage_node(tmp_path / "n", "node-a")
    fabric_dir = tmp_path / "fabric"
    env = {**os.environ, "MOKKA_IB_PEERS": "127.0.0.1:1,,", "MOKKA_IB_LISTEN": "127.0.0.1:0"}
    process = subprocess.Popen([*command(node.root), f"--fabric-dir={fabric_dir}", "--peer=127.0.0.1:2"], env=env,
                               stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith(f"mokka-ib-responder: serving 2 HCA(s) of node-a on {node.socket} and 127.0.0.1:")
        assert (fabric_dir / "node-a.json").exists()
    finally:
        process.terminate()
        process.communicate(timeout=10)
    assert process.returncode == 0
