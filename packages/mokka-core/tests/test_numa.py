"""The board's NUMA layout folded onto the host's CPUs (``model.numa``), and the host as an input."""

from __future__ import annotations

import pytest

from mokka_core.errors import ConfigError
from mokka_core.model import inputs
from mokka_core.model.numa import HOST_CPUS_FILE, HostCpus, fold, format_cpulist, parse_cpulist
from mokka_core.model.spec import NodeSpec

DGX_H100 = {0: parse_cpulist("0-55,112-167"), 1: parse_cpulist("56-111,168-223")}


def test_cpulists_parse_and_print_as_the_kernel_does() -> None:
    assert parse_cpulist("0-3,8\n") == (0, 1, 2, 3, 8)
    assert format_cpulist([8, 0, 1, 2, 3]) == "0-3,8"
    assert format_cpulist([5]) == "5"
    for bad in ("", "a-b", "3-1", "1,,x"):
        with pytest.raises(ValueError, match="not a CPU list"):
            parse_cpulist(bad)


@pytest.mark.parametrize(("host", "nodes", "expected"), [
    ((0, 1), 2, [(0,), (1,)]),  # one CPU each
    ((0,), 2, [(0,), (0,)]),  # both share it
    ((0, 1), 3, [(0,), (0,), (1,)]),
    (tuple(range(7)), 2, [(0, 1, 2, 3), (4, 5, 6)]),  # contiguous, the first node takes the odd one
    ((0, 2, 4, 6), 2, [(0, 2), (4, 6)]),  # offline CPUs are never named
])
def test_fold_splits_the_host_contiguously_and_evenly(host: tuple[int, ...], nodes: int,
                                                      expected: list[tuple[int, ...]]) -> None:
    assert fold(host, nodes) == expected


def test_a_host_with_the_boards_cpus_keeps_the_boards_lists() -> None:
    layout = HostCpus(DGX_H100, tuple(range(224)))
    assert layout.nodes == DGX_H100
    assert layout.cpus(1, parse_cpulist("56-111,168-223")) == DGX_H100[1]


def test_a_smaller_host_maps_board_lists_cpu_by_cpu() -> None:
    layout = HostCpus(DGX_H100, tuple(range(16)))
    assert layout.nodes == {0: tuple(range(8)), 1: tuple(range(8, 16))}
    assert layout.cpus(0, DGX_H100[0]) == tuple(range(8))  # the whole node: its whole share
    assert layout.cpus(0, parse_cpulist("0-55")) == (0, 1, 2, 3)  # one of two hyperthreads: half of it


@pytest.mark.parametrize("host", ["0", "0-1", "0-2", "0-15", "0-3,8-11"])
def test_every_cpu_list_of_the_node_names_a_host_cpu(host: str) -> None:
    online = set(parse_cpulist(host))
    node = NodeSpec(profile="h100", host_cpus=host).resolve()
    assert [numa.id for numa in node.numa_nodes] == [0, 1]
    assert set().union(*(parse_cpulist(numa.cpus) for numa in node.numa_nodes)) == online
    cpus_of = {numa.id: set(parse_cpulist(numa.cpus)) for numa in node.numa_nodes}
    for gpu in node.gpus:
        assert gpu.cpu_affinity is not None and gpu.numa_node is not None
        assert set(parse_cpulist(gpu.cpu_affinity)) <= cpus_of[gpu.numa_node]
    for root in node.root_complexes:
        assert set(parse_cpulist(root.cpu_affinity)) <= cpus_of[root.numa_node]


def test_two_host_cpus_give_each_socket_one() -> None:
    node = NodeSpec(profile="h100", host_cpus="0-1").resolve()
    assert [(n.id, n.cpus) for n in node.numa_nodes] == [(0, "0"), (1, "1")]
    assert [g.cpu_affinity for g in node.gpus] == ["0"] * 4 + ["1"] * 4
    assert node.numa_nodes[0].memory_bytes == 1 << 40  # DGX H100: 2 TB over two sockets


def test_the_hosts_cpus_are_an_input_fingerprinted_by_content(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inputs, "read_host_cpus", lambda: (0, 1, 2, 3))
    spec_inputs = NodeSpec(profile="t4").inputs()
    assert spec_inputs.host_cpus == (0, 1, 2, 3)
    assert spec_inputs.fingerprints is not None and spec_inputs.fingerprints[HOST_CPUS_FILE] == [0, 1, 2, 3]
    assert inputs.fingerprint(HOST_CPUS_FILE) == [0, 1, 2, 3]
    monkeypatch.setattr(inputs, "read_host_cpus", lambda: (0, 1))  # another machine: the snapshot is stale
    assert inputs.fingerprint(HOST_CPUS_FILE) == [0, 1]


def test_a_bad_host_cpu_list_names_itself() -> None:
    with pytest.raises(ConfigError, match=r"host_cpus.*not a CPU list"):
        NodeSpec(profile="t4", host_cpus="x").resolve()
