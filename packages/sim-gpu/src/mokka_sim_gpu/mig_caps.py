"""MIG capabilities: what the driver shows for a partition, in ``nv-caps.c``'s formats.

- ``/proc/driver/nvidia-caps/mig-minors``: every capability the driver can create and its
  ``nvidia-caps`` minor (static: it lists what does not exist too);
- ``/proc/driver/nvidia/capabilities/mig/{config,monitor}`` on a node with a MIG-capable GPU, and per
  GPU instance ``…/gpu<minor>/mig/gi<G>/access`` and per compute instance ``…/gi<G>/ci<C>/access``,
  each ``DeviceFileMinor``/``DeviceFileMode``/``DeviceFileModify`` as the driver prints them (mode
  decimal: 256 is 0400, 292 is 0444; modify is the ``ModifyDeviceFiles`` parameter, 1);
- ``/dev/nvidia-caps/nvidia-cap<minor>`` for each of them once a GPU is partitioned (on a real node
  ``nvidia-modprobe`` makes them when a partition is used), on the ``nvidia-caps`` major (dynamic,
  shared with the imex surface: ``mokka_core.stage.procdevices``).

The partition is the one the NVML library keeps in its setter record (``StageContext.mig``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mokka_core.stage import mig_partition
from mokka_core.stage.surface import CharDevice, Dir, Entry, File, StageContext

if TYPE_CHECKING:
    from mokka_core.model.node import Gpu, Node

MIG_MINORS_FILE = "proc/driver/nvidia-caps/mig-minors"
CAPABILITIES_DIR = "proc/driver/nvidia/capabilities"
CAPS_DEV_DIR = "dev/nvidia-caps"
READ_ONLY_ROOT = 0o400  # mig/config: only root may (re)configure
READ_ONLY_ALL = 0o444  # mig/monitor, GPU- and compute-instance access
MODIFY_DEVICE_FILES = 1


def mig_capable(gpu: Gpu) -> bool:
    return bool(gpu.config.mig and gpu.config.mig.gpu_instance_profiles)


def mig_cap_entries(node: Node, ctx: StageContext) -> list[Entry]:
    from mokka_core.stage.procdevices import host_majors

    entries: list[Entry] = [File(MIG_MINORS_FILE, mig_partition.render_mig_minors(), mode=0o444)]
    if not any(mig_capable(gpu) for gpu in node.gpus):
        return entries
    major = host_majors().caps
    caps: list[tuple[str, int, int]] = [  # (capability file, minor, mode)
        (f"{CAPABILITIES_DIR}/mig/config", mig_partition.CONFIG_MINOR, READ_ONLY_ROOT),
        (f"{CAPABILITIES_DIR}/mig/monitor", mig_partition.MONITOR_MINOR, READ_ONLY_ALL),
    ]
    for gpu in node.gpus:
        if not mig_capable(gpu):
            continue
        base = f"{CAPABILITIES_DIR}/gpu{gpu.minor_number}/mig"
        for gi in ctx.mig.get(gpu.index, ()):
            caps.append((f"{base}/gi{gi.id}/access", mig_partition.gi_minor(gpu.minor_number, gi.id), READ_ONLY_ALL))
            caps += [(f"{base}/gi{gi.id}/ci{ci.id}/access", mig_partition.ci_minor(gpu.minor_number, gi.id, ci.id),
                      READ_ONLY_ALL) for ci in gi.compute]
    entries += [File(path, render_capability(minor, mode), mode=0o444) for path, minor, mode in caps]
    if len(caps) > 2:  # nvidia-modprobe makes the nodes once a partition is used, config and monitor with them
        entries.append(Dir(CAPS_DEV_DIR))
        entries += [CharDevice(f"{CAPS_DEV_DIR}/nvidia-cap{minor}", major, minor, mode=mode) for _, minor, mode in caps]
    return entries


def render_capability(minor: int, mode: int) -> str:
    return f"DeviceFileMinor: {minor}\nDeviceFileMode: {mode}\nDeviceFileModify: {MODIFY_DEVICE_FILES}\n"
