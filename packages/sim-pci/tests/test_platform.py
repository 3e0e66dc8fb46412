"""The platform beside the PCI tree: NUMA nodes folded onto the host's CPUs, and the machine's DMI."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mokka_core.model.numa import parse_cpulist

NODES = "sys/devices/system/node"
DMI = "sys/class/dmi/id"


def test_two_host_cpus_make_two_nodes_of_one_cpu(staged) -> None:
    root = staged("h100", host_cpus="0-1")
    nodes = root / NODES
    assert sorted(p.name for p in nodes.glob("node*")) == ["node0", "node1"]
    for name in ("online", "possible", "has_cpu", "has_memory", "has_normal_memory"):
        assert (nodes / name).read_text() == "0-1\n"
    assert (nodes / "node0/cpulist").read_text() == "0\n"
    assert (nodes / "node1/cpulist").read_text() == "1\n"
    assert (nodes / "node0/cpumap").read_text() == "1\n"
    assert (nodes / "node1/cpumap").read_text() == "2\n"
    assert (nodes / "node0/distance").read_text() == "10 21\n"
    assert (nodes / "node1/distance").read_text() == "21 10\n"
    assert os.readlink(nodes / "node1/cpu1") == "../../cpu/cpu1"
    meminfo = (nodes / "node1/meminfo").read_text().splitlines()
    assert meminfo[0] == f"Node 1 MemTotal:       {(1 << 40) // 1024:8d} kB"  # DGX H100: 2 TB, two sockets
    assert meminfo[-1] == "Node 1 HugePages_Surp:      0"


@pytest.mark.parametrize("host", ["0", "0-1", "0-15"])
def test_every_function_names_a_staged_node_and_its_cpus(staged, host: str) -> None:
    root = staged("h100", host_cpus=host)
    devices = list((root / "sys/bus/pci/devices").iterdir())
    assert len(devices) == 4 + 8 + 8  # NVSwitches, GPUs, HCAs
    for device in devices:
        numa = (device / "numa_node").read_text().strip()
        node_cpus = set(parse_cpulist((root / NODES / f"node{numa}/cpulist").read_text()))
        assert set(parse_cpulist((device / "local_cpulist").read_text())) <= node_cpus
        assert node_cpus <= set(parse_cpulist(host))


@pytest.mark.parametrize("profile", ["h100", "gb200", "t4"])
def test_the_node_bus_lists_every_node(staged, profile: str) -> None:
    """``/sys/bus/node/devices/node<N>`` links each node (drivers/base/node.c registers them on the node bus)."""
    root = staged(profile, host_cpus="0-1")
    online = sorted(p.name for p in (root / NODES).glob("node*"))
    bus = root / "sys/bus/node/devices"
    assert sorted(p.name for p in bus.iterdir()) == online
    for name in online:
        assert os.readlink(bus / name) == f"../../../devices/system/node/{name}"
        assert (bus / name).resolve() == (root / NODES / name).resolve()


def test_a_single_socket_vm_has_one_node(staged) -> None:
    root = staged("t4", host_cpus="0-1")
    assert sorted(p.name for p in (root / NODES).glob("node*")) == ["node0"]
    assert (root / NODES / "node0/cpulist").read_text() == "0-1\n"
    assert (root / NODES / "node0/distance").read_text() == "10\n"


def test_dgx_h100_dmi(staged) -> None:
    root = staged("h100")
    assert os.readlink(root / "sys/class/dmi/id") == "../../devices/virtual/dmi/id"
    dmi = root / DMI
    assert (dmi / "product_name").read_text() == "DGXH100\n"
    assert (dmi / "sys_vendor").read_text() == "NVIDIA\n"
    assert (dmi / "board_name").read_text() == "DGXH100\n"
    assert (dmi / "chassis_type").read_text() == "23\n"
    assert not (dmi / "bios_version").exists()  # a string the firmware lacks has no file
    assert (dmi / "modalias").read_text() == (
        "dmi:bvnAmericanMegatrendsInternational,LLC.:svnNVIDIA:pnDGXH100:rvnNVIDIA:rnDGXH100:cvnNVIDIA:ct23:\n")
    assert (dmi / "uevent").read_text() == "MODALIAS=" + (dmi / "modalias").read_text()


def test_a_cloud_vm_names_its_instance_type(staged) -> None:
    dmi = staged("t4") / DMI
    assert (dmi / "sys_vendor").read_text() == "Amazon EC2\n"
    assert (dmi / "product_name").read_text() == "g4dn.xlarge\n"
    assert (dmi / "chassis_type").read_text() == "1\n"


def test_a_profile_without_dmi_stages_none(staged, tmp_path: Path) -> None:
    root = staged("h100")
    assert (root / DMI).exists()
    from mokka_core.model.spec import NodeSpec
    from mokka_core.stage.surface import StageContext
    from mokka_sim_pci.surface import PciSurface

    node = NodeSpec(profile="h100").resolve()
    node = node.replace(system=node.system.replace(dmi=None))
    paths = {entry.path for entry in PciSurface().plan(node, StageContext(root=tmp_path))}
    assert not any(path.startswith("sys/class/dmi") or "dmi/id" in path for path in paths)


def test_grace_gpu_memory_is_a_cpu_less_node_nvml_names(staged, make_node) -> None:
    from mokka_core.stage.nvml_view import gpu_numa_node

    root = staged("gb200", host_cpus="0-1")
    node = make_node("gb200", host_cpus="0-1")
    gpu_nodes = [gpu_numa_node(node, gpu) for gpu in node.gpus]
    assert gpu_nodes == [2, 10, 18, 26]  # nvmlDeviceGetNumaNodeId on a GB200 tray
    nodes = root / NODES
    assert (nodes / "online").read_text() == "0-2,10,18,26\n"
    assert (nodes / "possible").read_text() == "0-33\n"  # each GPU's block of MIG memory nodes
    assert (nodes / "has_cpu").read_text() == "0-1\n" and (nodes / "has_normal_memory").read_text() == "0-1\n"
    assert (nodes / "has_memory").read_text() == "0-2,10,18,26\n"
    assert (nodes / "node10/cpulist").read_text() == "\n"
    total = node.gpus[1].config.memory.total_bytes // 1024
    assert (nodes / "node10/meminfo").read_text().splitlines()[0] == f"Node 10 MemTotal:       {total:8d} kB"
    assert len((nodes / "node0/distance").read_text().split()) == 6  # one distance per online node
