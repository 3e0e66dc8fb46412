"""What the node state says about NVLink: the NV# matrix, per-link rows, fabric placement.

This is the model ``nvidia-smi topo -m`` / ``nvlink -s`` must show: the surface renders it into the
NVML state file (``nvml``), its ``check`` holds the staged file to it, and ``mokka-sim-nvlink links`` prints it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from mokka_core.model.node import Node


class LinkRow(NamedTuple):
    gpu: int
    link: int
    active: bool
    remote: str  # "GPU 3", "NVSwitch 0000:05:00.0", "CPU", "none"
    speed_mbps: int


def nv_matrix(node: Node) -> list[list[int]]:
    """NVLinks between each pair of GPUs (``topo -m``'s NV#): direct links, plus the links to switches
    when both ends reach one."""
    switched = [sum(1 for link in gpu.links if link.active and link.remote_type == "switch") for gpu in node.gpus]
    position = {gpu.index: n for n, gpu in enumerate(node.gpus)}
    rows = []
    for n, a in enumerate(node.gpus):
        row = [switched[n] if switched[m] and m != n else 0 for m in range(len(node.gpus))]
        for link in a.links:
            peer = position.get(link.remote_index) if link.remote_index is not None else None
            if link.active and link.remote_type == "gpu" and peer is not None and peer != n:
                row[peer] += 1
        rows.append(row)
    return rows


def link_rows(node: Node) -> list[LinkRow]:
    speed = node.nvlink.bandwidth_per_link_mbps if node.nvlink else 0
    rows = []
    for gpu in node.gpus:
        for link in gpu.links:
            if link.remote_type == "gpu":
                remote = f"GPU {link.remote_index}" if link.remote_index is not None else f"GPU {link.remote_bus_id}"
            elif link.remote_type == "switch":
                remote = f"NVSwitch {link.remote_bus_id}"
            else:
                remote = link.remote_type
            rows.append(LinkRow(gpu.index, link.link, link.active, remote, speed))
    return rows


def render_matrix(node: Node) -> str:
    """The NVLink part of ``nvidia-smi topo -m`` (NV# or ``-`` where there is none)."""
    names = [f"GPU{gpu.index}" for gpu in node.gpus]
    lines = ["\t".join(["", *names])]
    for i, row in enumerate(nv_matrix(node)):
        cells = [" X " if j == i else (f"NV{count}" if count else " - ") for j, count in enumerate(row)]
        lines.append("\t".join([names[i], *cells]))
    return "\n".join(lines) + "\n"


def render_links(node: Node) -> str:
    lines = []
    for row in link_rows(node):
        state = f"{row.speed_mbps / 1000:.3f} GB/s" if row.active else "<inactive>"
        lines.append(f"GPU {row.gpu} Link {row.link}: {state} -> {row.remote}")
    return "\n".join(lines) + ("\n" if lines else "")


def fabric_placement(node: Node) -> tuple[str, int] | None:
    """(cluster UUID, clique id) the GPUs report, or None when the node has no fabric (a100, b200, ...)."""
    fabric = node.gpus[0].config.fabric if node.gpus else None
    return (fabric.cluster_uuid, fabric.clique_id) if fabric else None
