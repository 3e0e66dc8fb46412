"""The MIG partition of each GPU as the NVML setter record holds it, and the driver's names for it.

The C engine (``native/src/mig.c``) is the one decider of placements, ids and capacity; it writes
``mig.gpu_instances`` (triples: id, ``mig_profile`` row, placement start) and
``mig.compute_instances`` (quads: GPU instance id, id, ``NVML_COMPUTE_INSTANCE_PROFILE_*``, start
slice) into the record.  This module only decodes them, for the surfaces that follow a partition
(capability files and device nodes, CDI devices), and names what the driver derives from them:
capability minors (``nv-caps.c``'s tables) and MIG device UUIDs (the library's ``mk_mig_uuid``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from ..errors import MokkaError
from . import nvml_settings
from .paths import NVML_SETTINGS_FILE

GI_KEY = "mig.gpu_instances"
CI_KEY = "mig.compute_instances"
#: compute slices of each NVML_COMPUTE_INSTANCE_PROFILE_* (nvml.h; the library's ``mk_ci_slices``)
CI_PROFILE_SLICES = (1, 2, 3, 4, 7, 8, 6, 1)

#: nv-caps.c numbers its capabilities in table order: nvlink fabric-mgmt 0, mig config 1 and monitor 2,
#: then per GPU minor 0-31, per GPU instance 0-14: its access and eight compute-instance accesses
CONFIG_MINOR = 1
MONITOR_MINOR = 2
GPUS = 32
GPU_INSTANCES = 15
COMPUTE_INSTANCES = 8


def default_ci_profile(slices: int) -> int:
    """The compute-instance profile that takes a whole GPU instance of ``slices`` (what ``-cgi … -C`` makes)."""
    return CI_PROFILE_SLICES.index(slices)


class ComputeInstance(NamedTuple):
    id: int
    profile: int  # NVML_COMPUTE_INSTANCE_PROFILE_*
    start: int
    device: int  # its index among the GPU's MIG devices (the record's order, as the library counts them)

    @property
    def slices(self) -> int:
        return CI_PROFILE_SLICES[self.profile] if self.profile < len(CI_PROFILE_SLICES) else 0


class GpuInstance(NamedTuple):
    id: int
    row: int  # the GPU's ``mig.gpu_instance_profiles`` entry
    start: int
    compute: tuple[ComputeInstance, ...]


Partitions = Mapping[int, tuple[GpuInstance, ...]]


def read(root: Path) -> dict[int, tuple[GpuInstance, ...]]:
    """GPU index -> its GPU instances, from the setter record under ``root`` (no record: none)."""
    return decode(nvml_settings.read(root), root / NVML_SETTINGS_FILE)


def decode(settings: nvml_settings.Settings, where: Path) -> dict[int, tuple[GpuInstance, ...]]:
    out = {}
    for index, values in settings.items():
        gis = _numbers(values.get(GI_KEY, ""), where, index, GI_KEY)
        cis = _numbers(values.get(CI_KEY, ""), where, index, CI_KEY)
        if len(gis) % 3 or len(cis) % 4:
            raise MokkaError(f"{where}: device.{index}: {GI_KEY} takes triples and {CI_KEY} quads")
        compute: dict[int, list[ComputeInstance]] = {}
        for n in range(0, len(cis), 4):
            compute.setdefault(cis[n], []).append(ComputeInstance(cis[n + 1], cis[n + 2], cis[n + 3], n // 4))
        instances = tuple(GpuInstance(gis[n], gis[n + 1], gis[n + 2], tuple(compute.get(gis[n], ())))
                          for n in range(0, len(gis), 3))
        if instances:
            out[index] = instances
    return out


def _numbers(text: str, where: Path, index: int, key: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part]
    except ValueError:
        raise MokkaError(f"{where}: device.{index}.{key}: expected comma-separated numbers, got {text!r}") from None


def gi_minor(gpu_minor: int, gi: int) -> int:
    """The ``nvidia-caps`` minor of ``gpu<N>/gi<G>/access``."""
    return CONFIG_MINOR + 2 + (gpu_minor * GPU_INSTANCES + gi) * (1 + COMPUTE_INSTANCES)


def ci_minor(gpu_minor: int, gi: int, ci: int) -> int:
    """The ``nvidia-caps`` minor of ``gpu<N>/gi<G>/ci<C>/access``."""
    return gi_minor(gpu_minor, gi) + 1 + ci


@functools.cache
def render_mig_minors() -> str:
    """``/proc/driver/nvidia-caps/mig-minors``: every capability the driver can create, whatever exists."""
    lines = [f"config {CONFIG_MINOR}", f"monitor {MONITOR_MINOR}"]
    for gpu in range(GPUS):
        for gi in range(GPU_INSTANCES):
            minor = gi_minor(gpu, gi)
            lines.append(f"gpu{gpu}/gi{gi}/access {minor}")
            lines += [f"gpu{gpu}/gi{gi}/ci{ci}/access {minor + 1 + ci}" for ci in range(COMPUTE_INSTANCES)]
    return "\n".join(lines) + "\n"


_MASK64 = (1 << 64) - 1


def _splitmix(z: int) -> int:
    z = (z + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def mig_uuid(gpu_uuid: str, gi: int, ci: int) -> str:
    """The ``MIG-…`` UUID the library gives a MIG device (``mk_mig_uuid`` in native/src/util.c)."""
    x = 0xCBF29CE484222325
    for byte in gpu_uuid.encode():
        x = ((x ^ byte) * 0x100000001B3) & _MASK64
    a = _splitmix(x ^ (gi << 40) ^ (ci << 48))
    b = _splitmix(a)
    return (f"MIG-{a >> 32:08x}-{(a >> 16) & 0xFFFF:04x}-5{a & 0xFFF:03x}-"
            f"{0x8000 | ((b >> 48) & 0x3FFF):04x}-{b & 0xFFFFFFFFFFFF:012x}")


def broken_by(parts: Partitions, profile_tables: Mapping[int, Sequence[Any]]) -> list[str]:
    """Why the library would leave out the record of ``parts`` under these profile tables (GPU index -> its
    ``mig.gpu_instance_profiles``, as rendered into the state file's ``mig_profile`` rows): the rows its GPU
    instances name must exist, hold their start among their placements and no fewer ``instances`` than
    the partition has of them (native/src/state.c, ``check_mig``)."""
    out = []
    for index, instances in sorted(parts.items()):
        rows = profile_tables.get(index, ())
        for row in sorted({gi.row for gi in instances}):
            at = [gi for gi in instances if gi.row == row]
            if row >= len(rows):
                out.append(f"GPU {index}: GPU instance {at[0].id} has profile row {row}, which the table no longer has")
                continue
            profile = rows[row]
            if len(at) > profile.instances:
                out.append(f"GPU {index}: {len(at)} GPU instances of {profile.name}, more than its instances "
                           f"({profile.instances})")
            out += [f"GPU {index}: GPU instance {gi.id} of {profile.name} at {gi.start}, not one of its placements "
                    f"{list(profile.placements)}" for gi in at if gi.start not in profile.placements]
    return out


def partitions(root: Path) -> dict[int, tuple[GpuInstance, ...]]:
    """:func:`read`, with a malformed record taken as no partition, as the library takes it (it logs it)."""
    try:
        return read(root)
    except MokkaError:
        return {}
