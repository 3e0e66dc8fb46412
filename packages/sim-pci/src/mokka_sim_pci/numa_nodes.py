"""The node's NUMA nodes as ``/sys/devices/system/node`` shows them (drivers/base/node.c formats).

Each node's CPUs are host CPUs (``mokka_core.model.numa`` folds the board onto the host), so the
``numa_node`` and ``local_cpulist`` of every PCI function name a node and CPUs listed here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mokka_core.model.numa import format_cpulist, parse_cpulist
from mokka_core.stage.surface import Dir, Entry, File, Symlink

from .sysfs import cpumask

if TYPE_CHECKING:
    from mokka_core.model.node import Node, NumaNode

SYS_NODES = "sys/devices/system/node"
LOCAL_DISTANCE = 10  # the ACPI SLIT's own-node distance
REMOTE_DISTANCE = 21  # another socket's, as two-socket x86 firmware reports it


def numa_node_entries(node: Node, nr_cpus: int) -> list[Entry]:
    ids = format_cpulist(numa.id for numa in node.numa_nodes)
    entries: list[Entry] = [Dir(SYS_NODES)]
    for name in ("online", "possible", "has_cpu", "has_memory", "has_normal_memory"):
        entries.append(File(f"{SYS_NODES}/{name}", f"{ids}\n", mode=0o444))
    for numa in node.numa_nodes:
        entries += _node_dir(numa, node.numa_nodes, nr_cpus)
    return entries


def _node_dir(numa: NumaNode, every: tuple[NumaNode, ...], nr_cpus: int) -> list[Entry]:
    base = f"{SYS_NODES}/node{numa.id}"
    cpus = parse_cpulist(numa.cpus)
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
