"""The real InfiniBand tools from Debian against staged nodes (root; MOKKA_REQUIRE_CONSUMERS=1 in CI).

Each tool runs in a private mount namespace where the node's staged /sys and /dev are at the real
paths (what ``mokka run`` provides), with the shim preloaded where MADs or verbs are needed.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mokka_core.model.identity import format_guid, hca_lid
from mokka_sim_ib.testing import SimNode, namespaced, run_on_node, stage_node

pytestmark = pytest.mark.usefixtures("ib_tools")


def tool(node: SimNode, *argv: str, shim: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return run_on_node(node.root, list(argv), shim=shim, timeout=timeout)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"{result.args[-3:]} exited {result.returncode}:\n{result.stdout}{result.stderr}"
    return result.stdout


def test_ibstat_and_ibstatus_show_the_hcas_rate_and_state(tmp_path: Path) -> None:
    node = stage_node(tmp_path / "n", "gpu-node-1", gpus=4)
    out = ok(tool(node, "ibstat", shim=False))
    assert re.findall(r"CA '(mlx5_\d+)'", out) == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert out.count("State: Active") == 4 and out.count("Physical state: LinkUp") == 4
    assert out.count("Rate: 400") == 4 and "CA type: MT4129" in out and "Firmware version: 28.39.2048" in out
    assert f"Base lid: {node.lid(2)}" in out
    status = ok(tool(node, "ibstatus", shim=False))
    assert status.count("rate:\t\t 400 Gb/sec (4X NDR)") == 4 and status.count("4: ACTIVE") == 4


def test_ibv_devices_and_ibv_devinfo(tmp_path: Path) -> None:
    node = stage_node(tmp_path / "n", "gpu-node-1", gpus=2)
    ports = node.config.ports
    devices = ok(tool(node, "ibv_devices"))
    for port in ports:
        assert re.search(rf"{port.hca}\s+{port.node_guid:016x}", devices), devices
    info = ok(tool(node, "ibv_devinfo"))
    assert info.count("state:\t\t\tPORT_ACTIVE (4)") == 2
    for port in ports:
        assert f"node_guid:\t\t\t{format_guid(port.node_guid)}" in info
        assert f"port_lid:\t\t{port.lid}" in info
    verbose = ok(tool(node, "ibv_devinfo", "-v", "-d", "mlx5_1"))
    assert f"GID[  0]:\t\tfe80:0000:0000:0000:{format_guid(ports[1].port_guid)}" in verbose


def test_ibping_sminfo_perfquery_and_fabric_walk_between_two_nodes(fabric) -> None:  # type: ignore[no-untyped-def]
    a, b = fabric("node-a"), fabric("node-b")
    pings = ok(tool(a, "ibping", "-c", "2", "-L", str(b.lid(1)), timeout=30))
    assert pings.count(f"Pong from node-b (Lid {b.lid(1)})") == 2 and "0% packet loss" in pings
    guid = ok(tool(a, "ibping", "-c", "1", "-G", f"0x{b.config.ports[0].port_guid:016x}", timeout=30))
    assert f"Pong from node-b (Lid {b.lid(0)})" in guid
    assert "state 3 SMINFO_MASTER" in ok(tool(a, "sminfo"))
    links = ok(tool(a, "iblinkinfo"))
    assert '"node-b mlx5_0"' in links and '"node-a mlx5_0"' in links and "Active/  LinkUp" in links
    counters = ok(tool(a, "perfquery", str(b.lid(0)), "1"))
    assert f"# Port counters: Lid {b.lid(0)} port 1" in counters and "PortXmitData:....................0" in counters
    topology = ok(tool(b, "ibnetdiscover"))
    assert topology.count("Ca\t1 ") == 2 and '"node-a mlx5_0"' in topology


def test_failed_surface_ports_are_down_everywhere(fabric) -> None:  # type: ignore[no-untyped-def]
    a, b = fabric("node-a"), fabric("node-b", state="failed")
    stat = ok(tool(b, "ibstat", shim=False))
    assert stat.count("State: Down") == 2 and stat.count("Physical state: Polling") == 2
    assert "4: ACTIVE" not in ok(tool(b, "ibstatus", shim=False))
    assert ok(tool(b, "ibv_devinfo")).count("PORT_DOWN (1)") == 2
    healthy_lid = hca_lid("node-b", 0, 2)  # where node-b's first port would be with its link up
    lost = tool(a, "ibping", "-c", "1", "-t", "200", "-L", str(healthy_lid), timeout=30)
    assert "100% packet loss" in lost.stdout, lost.stdout + lost.stderr
    walk = ok(tool(a, "iblinkinfo"))
    assert "node-b" not in walk


def test_disabled_surface_shows_no_hcas(tmp_path: Path) -> None:
    node = stage_node(tmp_path / "n", "gpu-node-1", enabled=False)
    assert not (node.root / "sys/class/infiniband").exists()
    assert "mlx5" not in tool(node, "ibstat", shim=False).stdout
    devices = tool(node, "ibv_devices")
    assert "mlx5" not in devices.stdout


def test_ibping_reaches_a_real_ibping_server(fabric) -> None:  # type: ignore[no-untyped-def]
    a, b = fabric("node-a"), fabric("node-b")
    server = subprocess.Popen(namespaced(b.root, ["ibping", "-S"]),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 15
        while True:  # until the server has registered its agent, the responder answers in its place
            pong = ok(tool(a, "ibping", "-c", "1", "-L", str(b.lid(0)), timeout=30))
            if f"Pong from {socket.gethostname()}" in pong or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert f"Pong from {socket.gethostname()}" in pong, pong
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_mokka_run_shows_the_node(tmp_path: Path) -> None:
    """mokka run starts the node's responder and preloads the shim: the tools work with nothing else."""
    script = """
    set -e
    ibstat
    lid=$(cat /sys/class/infiniband/mlx5_1/ports/1/lid)
    ibping -c 1 -L "$((lid))"
    sminfo
    """
    result = subprocess.run([sys.executable, "-m", "mokka_core", "run", "--profile", "h100", "--gpus", "2",
                             "--node-name", "run-node", "--", "sh", "-c", script],
                            capture_output=True, text=True, timeout=90)
    out = ok(result)
    assert out.count("State: Active") == 2 and "Pong from run-node" in out and "SMINFO_MASTER" in out
