"""Which of the node's GPUs a container asked for with ``NVIDIA_VISIBLE_DEVICES``, as the NVIDIA container runtime
reads it (the device plugin's ``envvar`` strategy writes it): the device nodes to give that container.

The value is a comma-separated list: ``all``, ``none`` (no GPU, the control devices only), ``void`` or nothing (as
if unset: nothing NVIDIA at all; ``void`` anywhere in the list wins), or GPUs by index, UUID, MIG UUID or
``<gpu>:<mig>`` index; the first ``all`` or ``none`` decides over the ids.  A MIG device brings its GPU's node.
The GPUs' indices, UUIDs and minor numbers are those of the node's NVML state file.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from ...errors import MokkaError
from ...schema.readfile import read_bounded
from ...stage import mig_partition
from ...stage.paths import NVML_STATE_FILE

ENV = "NVIDIA_VISIBLE_DEVICES"
#: what nvidia-container-toolkit's nvcdi gives every GPU container besides its GPUs (``common-nvml.go``)
CONTROL_NODES = ("nvidia-modeset", "nvidia-uvm-tools", "nvidia-uvm", "nvidiactl")
#: the largest state file the mock library reads (native/src/mokka.h MK_MAX_FILE)
MAX_STATE_BYTES = 16 << 20


class Gpu(NamedTuple):
    nvml_index: int
    uuid: str
    minor: int


class Request(NamedTuple):
    """What the variable asks for: every GPU, none (``gpus`` empty, control devices given), or nothing NVIDIA."""

    every: bool
    void: bool
    gpus: frozenset[int]  # minor numbers
    unknown: tuple[str, ...]  # ids that name no GPU of the node


def node_gpus(root: Path) -> list[Gpu]:
    """The node's GPUs, from its NVML state file (none when it cannot be read)."""
    fields: dict[int, dict[str, str]] = {}
    try:  # bounded, and never a FIFO or device: a CreateContainer must not wait on it
        text = read_bounded(root / NVML_STATE_FILE, MAX_STATE_BYTES).decode()
    except (OSError, UnicodeDecodeError, MokkaError):
        return []
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        parts = key.split(".")
        if sep and len(parts) == 3 and parts[0] == "device" and parts[1].isdigit() and \
                parts[2] in ("uuid", "minor_number"):
            fields.setdefault(int(parts[1]), {})[parts[2]] = value
    return [Gpu(index, values.get("uuid", ""), int(values.get("minor_number", "0") or 0))
            for index, values in sorted(fields.items()) if values.get("minor_number", "0").isdigit()]


def request(value: str, root: Path) -> Request:
    ids = [part.strip() for part in value.split(",") if part.strip()]
    if not ids or "void" in ids:
        return Request(False, True, frozenset(), ())
    for each in ids:
        if each in ("all", "none"):
            return Request(each == "all", False, frozenset(), ())
    gpus = node_gpus(root)
    by_index = {str(gpu.nvml_index): gpu for gpu in gpus}
    by_uuid = {gpu.uuid.lower(): gpu for gpu in gpus if gpu.uuid}
    migs: dict[str, Gpu] | None = None
    chosen, unknown = set(), []
    for each in ids:
        gpu = by_index.get(each.partition(":")[0]) if each[0].isdigit() else by_uuid.get(each.lower())
        if gpu is None and each.upper().startswith("MIG-"):
            migs = migs if migs is not None else _mig_parents(root, gpus)
            gpu = migs.get(each.lower())
        if gpu is None:
            unknown.append(each)
        else:
            chosen.add(gpu.minor)
    return Request(False, False, frozenset(chosen), tuple(unknown))


def _mig_parents(root: Path, gpus: list[Gpu]) -> dict[str, Gpu]:
    by_index = {gpu.nvml_index: gpu for gpu in gpus}
    out = {}
    for index, instances in mig_partition.partitions(root).items():
        gpu = by_index.get(index)
        if gpu is None:
            continue
        for gi in instances:
            for ci in gi.compute:
                out[mig_partition.mig_uuid(gpu.uuid, gi.id, ci.id).lower()] = gpu
    return out


def wanted(name: str, asked: Request) -> bool:
    """Whether the staged ``/dev/<name>`` goes to a container that asked for ``asked``."""
    if asked.void:
        return False
    if asked.every or name in CONTROL_NODES:
        return True
    minor = name.removeprefix("nvidia")
    return minor.isdigit() and int(minor) in asked.gpus
