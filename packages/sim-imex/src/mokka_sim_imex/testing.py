"""Run fake IMEX daemons on loopback addresses: the test runner that ships with the daemon."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

from .config import CONFIG_FILE, NODES_CONFIG_FILE, render_config, render_nodes_config


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def configure(root: Path, me: str, peers: list[str], server_port: int, cmd_port: int) -> Path:
    """Point a staged node's IMEX config at its domain, as an administrator would."""
    (root / NODES_CONFIG_FILE).write_text(render_nodes_config(peers))
    (root / CONFIG_FILE).write_text(render_config(root, node_ip=me, server_port=server_port, cmd_port=cmd_port))
    return root / CONFIG_FILE


def ctl_q(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mokka_sim_imex.ctl", "-q", "-c", str(config)],
                          capture_output=True, text=True, timeout=30)


class Daemons:
    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[str]] = []

    def start(self, command: list[str]) -> subprocess.Popen[str]:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.procs.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen[str]) -> str:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=10)
        return out

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=10)
