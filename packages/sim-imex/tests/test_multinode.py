"""Four simulated GB200 nodes on one machine forming one IMEX domain and one NVLink clique.

Each node has its own root, node name and loopback address (127.0.0.2-5); a shared topology
overlay puts them in one clique.  Loopback addresses need no privileges on Linux.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mokka_core.model.node import Node
from mokka_core.model.spec import NodeSpec
from mokka_core.stage.staging import stage_wave
from mokka_core.stage.surface import StageContext
from mokka_core.testing.consumers import ConsumerUnavailable, missing, nvidia_smi
from mokka_core.testing.nvml import stage_nvml_view
from mokka_core.testing.waiting import wait_for
from mokka_sim_imex.surface import ImexSurface
from mokka_sim_imex.testing import Daemons, configure, ctl_q, free_port

CLUSTER_UUID = "0c6a3e1d-7b2f-4e58-9a41-d2f0b8c6e5a7"
CLIQUE = 32766
NAMES = [f"gb200-rack1-{n}" for n in range(4)]
ADDRESSES = [f"127.0.0.{n + 2}" for n in range(4)]
OVERLAY = f"""version: 1
domains:
- name: rack1
  uuid: {CLUSTER_UUID}
  cliques:
  - id: {CLIQUE}
    nodes: [{", ".join(NAMES)}]
"""


def resolve(name: str, overlay: Path, imex_state: str = "healthy") -> Node:
    return NodeSpec(profile="gb200", node_name=name, overlay_file=overlay,
                    surfaces={"imex": {"state": imex_state}}).resolve()


@pytest.fixture
def cluster(tmp_path: Path) -> dict:
    overlay = tmp_path / "topology.yaml"
    overlay.write_text(OVERLAY)
    server_port, cmd_port = free_port(), free_port()
    nodes = {}
    for name, address in zip(NAMES, ADDRESSES, strict=True):
        root = tmp_path / name
        node = resolve(name, overlay)
        stage_wave({"imex": ImexSurface().plan(node, StageContext(root=root))}, root)
        config = configure(root, address, ADDRESSES, server_port, cmd_port)
        nodes[name] = {"root": root, "node": node, "config": config}
    return {"overlay": overlay, "nodes": nodes}


def start(daemons: Daemons, cluster: dict, name: str, imex_state: str = "healthy") -> subprocess.Popen[str]:
    root = cluster["nodes"][name]["root"]
    (service,) = ImexSurface().services(resolve(name, cluster["overlay"], imex_state), StageContext(root=root))
    return daemons.start(service.command)


def answers(cluster: dict, names: list[str] = NAMES) -> dict[str, str]:
    return {name: ctl_q(cluster["nodes"][name]["config"]).stdout.strip() for name in names}


def settle(cluster: dict, expected: dict[str, str]) -> dict[str, str]:
    wait_for(lambda: answers(cluster, list(expected)) == expected, what="every node's answers")
    return answers(cluster, list(expected))


def test_every_node_reports_the_same_clique(cluster: dict) -> None:
    placements = {(gpu.config.fabric.cluster_uuid, gpu.config.fabric.clique_id)
                  for entry in cluster["nodes"].values() for gpu in entry["node"].gpus}
    assert placements == {(CLUSTER_UUID, CLIQUE)}
    assert len({gpu.uuid for entry in cluster["nodes"].values() for gpu in entry["node"].gpus}) == 16


def test_imex_ready_only_when_every_peer_is_up(cluster: dict, daemons: Daemons) -> None:
    first_three = {name: start(daemons, cluster, name) for name in NAMES[:3]}
    assert settle(cluster, dict.fromkeys(NAMES[:3], "NOT_READY 3/4")) == dict.fromkeys(NAMES[:3], "NOT_READY 3/4")
    assert all(ctl_q(cluster["nodes"][n]["config"]).returncode == 1 for n in NAMES[:3])

    last = start(daemons, cluster, NAMES[3])
    assert settle(cluster, dict.fromkeys(NAMES, "READY")) == dict.fromkeys(NAMES, "READY")
    assert all(ctl_q(cluster["nodes"][n]["config"]).returncode == 0 for n in NAMES)
    by_root = subprocess.run([sys.executable, "-m", "mokka_sim_imex.ctl", "-q", "--root",
                              str(cluster["nodes"][NAMES[0]]["root"])], capture_output=True, text=True, timeout=30)
    assert (by_root.returncode, by_root.stdout) == (0, "READY\n")

    # fail the last node's imex surface: its daemon restarts never ready, and the others lose it
    daemons.stop(last)
    failed = start(daemons, cluster, NAMES[3], imex_state="failed")
    expected = dict.fromkeys(NAMES, "NOT_READY 3/4")
    assert settle(cluster, expected) == expected
    assert all(ctl_q(cluster["nodes"][n]["config"]).returncode == 1 for n in NAMES)

    # heal it: READY everywhere again
    daemons.stop(failed)
    start(daemons, cluster, NAMES[3])
    assert settle(cluster, dict.fromkeys(NAMES, "READY")) == dict.fromkeys(NAMES, "READY")
    for proc in first_three.values():
        assert "READY" in daemons.stop(proc)


def test_nvidia_smi_on_every_node_shows_the_same_clique(cluster: dict) -> None:
    """Through the real nvidia-smi, once the mock library and its NVML view renderer are available."""
    try:
        smi = nvidia_smi("550")
    except ConsumerUnavailable as exc:
        missing(str(exc))
    for entry in cluster["nodes"].values():
        lib_dir = stage_nvml_view(entry["root"], entry["node"])
        result = subprocess.run([str(smi), "-q"], capture_output=True, text=True, timeout=60,
                                env={**os.environ, "LD_LIBRARY_PATH": str(lib_dir)})
        assert result.returncode == 0, result.stderr
        assert result.stdout.count(f"ClusterUUID                       : {CLUSTER_UUID}") == 4
        assert result.stdout.count(f"CliqueId                          : {CLIQUE}") == 4
