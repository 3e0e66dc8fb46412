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
    assert topology.count("Ca\t1 ") == 4 and '"node-a mlx5_0"' in topology


SWITCH_LINE = re.compile(r'^Switch\t(\d+) "S-([0-9a-f]+)"\t\t# "([^"]*)" enhanced port 0 lid (\d+) lmc 0$')
CA_LINE = re.compile(r'^Ca\t1 "H-([0-9a-f]+)"\t\t# "([^"]*)"$')
LINK_LINE = re.compile(r'^\[(\d+)\](?:\([0-9a-f]+\))?\s+"[SH]-[0-9a-f]+"\[(\d+)\](?:\([0-9a-f]+\))?\s+# (.*)$')


def topology(text: str) -> tuple[dict[str, dict[int, tuple[str, int, str]]], dict[str, tuple[str, int]]]:
    """ibnetdiscover's topology file (ibnetdiscover(8)): each switch's linked ports (port -> the far end's
    description, port, speed) and each CA's one link (description -> the switch's description and port)."""
    switches: dict[str, dict[int, tuple[str, int, str]]] = {}
    cas: dict[str, tuple[str, int]] = {}
    current: tuple[str, str] | None = None
    for line in text.splitlines():
        if m := SWITCH_LINE.match(line):
            current = ("switch", m[3])
            switches[m[3]] = {}
        elif m := CA_LINE.match(line):
            current = ("ca", m[2])
        elif (m := LINK_LINE.match(line)) and current is not None:
            descs = re.findall(r'"([^"]*)"', m[3])
            if current[0] == "switch":
                switches[current[1]][int(m[1])] = (descs[0], int(m[2]), m[3].rsplit(" ", 1)[-1])
            else:
                cas[current[1]] = (descs[0], int(m[2]))
    return switches, cas


def expected_tree(names: list[str], rails: int, su_size: int) -> dict[str, dict[int, tuple[str, int]]]:
    """The rail-optimised layout (README "The fabric"), independently of the responder: nodes by name; HCA rail r
    of the node at slot s of unit u on port s + 1 of leaf (u, r); leaf port su_size + 1 + k up to spine k's port
    u * rails + r + 1."""
    tree: dict[str, dict[int, tuple[str, int]]] = {}
    units = (len(names) + su_size - 1) // su_size
    for unit in range(units):
        for rail in range(rails):
            leaf = f"MF0;su{unit + 1:02d}-leaf-r{rail}:MQM9700/U1"
            ports = tree.setdefault(leaf, {})
            for slot, name in enumerate(names[unit * su_size:(unit + 1) * su_size]):
                ports[slot + 1] = (f"{name} mlx5_{rail}", 1)
            for spine in range(rails):
                ports[su_size + 1 + spine] = (f"MF0;spine-{spine + 1:02d}:MQM9700/U1", unit * rails + rail + 1)
                tree.setdefault(f"MF0;spine-{spine + 1:02d}:MQM9700/U1", {})[unit * rails + rail + 1] = (leaf,
                                                                                                    su_size + 1 + spine)
    return tree


@pytest.mark.parametrize(("profile", "gpus", "rails", "su_size", "count"),
                         [("h100", 8, 8, 32, 2), ("h100", 8, 8, 32, 4), ("gb200", 4, 4, 18, 3)])
def test_ibnetdiscover_finds_every_node_under_the_same_leaves_and_spines(
        fabric, profile: str, gpus: int, rails: int, su_size: int, count: int) -> None:  # type: ignore[no-untyped-def]
    nodes = [fabric(f"{profile}-node-{i}", profile=profile, gpus=gpus) for i in range(count)]
    names = sorted(node.name for node in nodes)
    want = expected_tree(names, rails, su_size)
    for asking in (nodes[0], nodes[-1]):
        out = ok(tool(asking, "ibnetdiscover", timeout=120))
        # the default port is the first HCA's, as on a real host (sysfs lists mlx5_0 first)
        assert f"# Initiated from node {asking.config.ports[0].node_guid:016x} " in out
        switches, cas = topology(out)
        assert {name: {port: far[:2] for port, far in ports.items()} for name, ports in switches.items()} == want
        assert all(far[2] == "4xNDR" for ports in switches.values() for far in ports.values())
        assert len(cas) == count * rails
        for position, name in enumerate(names):
            for rail in range(rails):
                leaf = f"MF0;su{position // su_size + 1:02d}-leaf-r{rail}:MQM9700/U1"
                assert cas[f"{name} mlx5_{rail}"] == (leaf, position % su_size + 1)


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
