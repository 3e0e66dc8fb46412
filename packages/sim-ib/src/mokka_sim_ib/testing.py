"""Helpers for tests of sim-ib and its consumers: staged nodes and their running responders."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mokka_core.model.node import Node
from mokka_core.model.spec import NodeSpec
from mokka_core.stage.staging import stage_wave
from mokka_core.stage.surface import StageContext

from . import responder
from .config import SOCKET, NodeConfig
from .hca import node_config, ports
from .surface import IbSurface


def namespaced(root: Path, argv: Sequence[str], *, shim: bool = True) -> list[str]:
    """The argv that runs ``argv`` on the node under ``root``: shown at the real paths, shim preloaded."""
    return [sys.executable, "-m", "mokka_sim_ib", "exec", "--root", str(root), *([] if shim else ["--no-shim"]),
            "--", *argv]


def run_on_node(root: Path, argv: Sequence[str], *, shim: bool = True,
                timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(namespaced(root, argv, shim=shim), capture_output=True, text=True, timeout=timeout)


@dataclass
class SimNode:
    name: str
    root: Path
    config: NodeConfig  # what was staged (the node file's content)
    process: subprocess.Popen[bytes] | None = field(default=None)

    @property
    def socket(self) -> Path:
        return self.root / SOCKET

    def lid(self, hca: int = 0) -> int:
        return self.config.ports[hca].lid


def stage_node(root: Path, name: str, *, state: str = "healthy", enabled: bool = True, gpus: int = 2,
               profile: str = "h100") -> SimNode:
    spec = NodeSpec(profile=profile, gpus=gpus, node_name=name, surfaces={"ib": {"enabled": enabled, "state": state}})
    node = spec.resolve()
    stage_wave({"ib": IbSurface().plan(node, StageContext(root=root))}, root)
    _stand_in_for_pci(root, node)
    return SimNode(name, root, node_config(node, ports(node)))


def _stand_in_for_pci(root: Path, node: Node) -> None:
    """What sim-pci renders for each HCA function and libibverbs reads (its modalias), if sim-pci is absent."""
    for hca in node.hcas:
        function = root / "sys/devices" / hca.root_complex / hca.bus_id
        modalias = function / "modalias"
        if not modalias.exists():
            modalias.write_text(f"pci:v000015B3d{hca.device_id:08X}sv000015B3sd00000041bc02sc07i00\n")


def start_responder(node: SimNode, fabric_dir: Path, *options: str) -> SimNode:
    """Run the node's responder (``mokka-ib-responder``, with ``options``) until :func:`stop_responder`."""
    env = {**os.environ, "MOKKA_IB_FABRIC_DIR": str(fabric_dir)}
    node.process = subprocess.Popen([*responder.command(node.root), *options], env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 15
    while not (node.socket.exists() and (fabric_dir / f"{node.name}.json").exists()):
        if node.process.poll() is not None or time.monotonic() > deadline:
            output = node.process.stdout.read().decode() if node.process.stdout else ""
            raise RuntimeError(f"responder of {node.name} did not start: {output}")
        time.sleep(0.05)
    return node


def stop_responder(node: SimNode) -> None:
    if node.process is not None and node.process.poll() is None:
        node.process.send_signal(signal.SIGTERM)
        node.process.wait(timeout=10)
    if node.process is not None and node.process.stdout is not None:
        node.process.stdout.close()
