"""The node's NUMA nodes as ``/sys/devices/system/node`` shows them (drivers/base/node.c formats).

Each node's CPUs are host CPUs (``mokka_core.model.numa`` folds the board onto the host), so the
``numa_node`` and ``local_cpulist`` of every PCI function name a node and CPUs listed here.  On a
coherent Grace board each GPU's memory is a CPU-less node too, the one NVML's
``nvmlDeviceGetNumaNodeId`` names (``gpu_numa_node``); its block of possible MIG nodes after it
stays offline, and GPU memory is not normal memory (the driver onlines it movable).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mokka_core.model.node import NumaNode
from mokka_core.model.numa import format_cpulist, parse_cpulist
from mokka_core.stage.nvml_view import GPU_NUMA_NODES_PER_GPU, gpu_numa_node
from mokka_core.stage.surface import Dir, Entry, File, Symlink

from .sysfs import cpumask

if TYPE_CHECKING:
    from mokka_core.model.node import Node

SYS_NODES = "sys/devices/system/node"
BUS_NODES = "sys/bus/node/devices"  # the node bus lists each node (nfd-worker counts NUMA nodes here)
LOCAL_DISTANCE = 10  # the ACPI SLIT's own-node distance
REMOTE_DISTANCE = 21  # another socket's, as two-socket x86 firmware reports it


def numa_node_entries(node: Node, nr_cpus: int) -> list[Entry]:
    cpu_nodes = list(node.numa_nodes)
    gpu_nodes = [NumaNode(id=own, cpus="", memory_bytes=gpu.config.memory.total_bytes if gpu.config.memory else 0)
                 for gpu in node.gpus if (own := gpu_numa_node(node, gpu)) is not None]
    every = cpu_nodes + gpu_nodes
    online = format_cpulist(numa.id for numa in every)
    possible = online
    if gpu_nodes:
        possible = f"0-{max(n.id for n in cpu_nodes) + GPU_NUMA_NODES_PER_GPU * len(node.gpus)}"
    with_cpus = format_cpulist(numa.id for numa in cpu_nodes)
    sets = {"online": online, "possible": possible, "has_cpu": with_cpus, "has_memory": online,
            "has_normal_memory": with_cpus}
    entries: list[Entry] = [Dir(SYS_NODES), Dir(BUS_NODES)]
    entries += [File(f"{SYS_NODES}/{name}", f"{ids}\n", mode=0o444) for name, ids in sets.items()]
    for numa in every:
        entries += _node_dir(numa, every, nr_cpus)
        entries.append(Symlink(f"{BUS_NODES}/node{numa.id}", f"../../../devices/system/node/node{numa.id}"))
    return entries


def _node_dir(numa: NumaNode, every: list[NumaNode], nr_cpus: int) -> list[Entry]:
    base = f"{SYS_NODES}/node{numa.id}"
    cpus = parse_cpulist(numa.cpus) if numa.cpus else ()
    distances = " ".join(str(LOCAL_DISTANCE if other.id == numa.id else REMOTE_DISTANCE) for other in every)
    entries: list[Entry] = [
        Dir(base),
        File(f"{base}/cpulist", f"{numa.cpus}\n", mode=0o444),
        File(f"{base}/cpumap", cpumask(list(cpus), nr_cpus) + "\n", mode=0o444),
        File(f"{base}/distance", f"{distances}\n", mode=0o444),
        File(f"{base}/meminfo", meminfo(numa), mode=0o444),
    ]
    entries += [Symlink(f"{base}/cpu{cpu}", f"../../cpu/cpu{cpu}") for cpu in cpus]
    return entries


def meminfo(numa: NumaNode) -> str:
    """``node<N>/meminfo``: the node's share of the board's memory, all of it free (a node at rest)."""
    kib = numa.memory_bytes // 1024
    rows = [("MemTotal", kib), ("MemFree", kib), ("MemUsed", 0), ("Active", 0), ("Inactive", 0),
            ("Dirty", 0), ("FilePages", 0), ("Mapped", 0), ("AnonPages", 0), ("Shmem", 0), ("KernelStack", 0),
            ("PageTables", 0), ("Slab", 0)]
    lines = [f"Node {numa.id} {name + ':':<15} {value:8d} kB" for name, value in rows]
    lines += [f"Node {numa.id} {name + ':':<17}{0:5d}" for name in ("HugePages_Total", "HugePages_Free",
                                                                   "HugePages_Surp")]
    return "\n".join(lines) + "\n"
