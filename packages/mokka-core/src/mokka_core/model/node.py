"""The resolved node: what every surface renders from, one immutable value that imports nothing.

``model.resolve`` builds it from validated documents; ``model.apply`` lays an override over it;
``model.codec`` turns it into JSON and back (the node"s snapshot).  Every field is total: a
default is applied once, in ``resolve``, so two surfaces reading the same field always agree.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..schema.surfaces import SurfaceHealth
from .config import GpuConfig, Infiniband, Nvlink, System
from .value import Value

_set = object.__setattr__  # the one way a field is set: in __init__

#: a node's name where neither the spec nor $NODE_NAME gives one
DEFAULT_NODE_NAME = "mokka-node"


class SurfaceSettings(Value):
    __slots__ = ("enabled", "state",)
    enabled: bool
    state: SurfaceHealth

    def __init__(self, *, enabled: bool = True, state: SurfaceHealth = "healthy") -> None:
        _set(self, "enabled", enabled)
        _set(self, "state", state)

    @property
    def active(self) -> bool:
        """Staged and healthy."""
        return self.enabled and self.state == "healthy"


class RootComplex(Value):
    __slots__ = ("id", "domain", "bus", "numa_node", "cpu_affinity",)
    id: str  # pciDDDD:BB
    domain: int
    bus: int
    numa_node: int
    cpu_affinity: str

    def __init__(self, *, id: str, domain: int, bus: int, numa_node: int, cpu_affinity: str) -> None:
        _set(self, "id", id)
        _set(self, "domain", domain)
        _set(self, "bus", bus)
        _set(self, "numa_node", numa_node)
        _set(self, "cpu_affinity", cpu_affinity)


class NumaNode(Value):
    """One NUMA node of the board, with its CPUs on the host (``model.numa``) and its share of memory."""

    __slots__ = ("id", "cpus", "memory_bytes",)
    id: int
    cpus: str  # a CPU list of the host, as the kernel prints one
    memory_bytes: int

    def __init__(self, *, id: int, cpus: str, memory_bytes: int) -> None:
        _set(self, "id", id)
        _set(self, "cpus", cpus)
        _set(self, "memory_bytes", memory_bytes)


class Link(Value):
    __slots__ = ("link", "up", "active", "remote_type", "remote_bus_id", "remote_index",)
    link: int
    up: bool  # as the profile has it
    active: bool  # up, and the nvlink surface healthy
    remote_type: str  # "gpu" | "switch" | "cpu" | "none"
    remote_bus_id: str | None
    remote_index: int | None  # GPU index when remote_type == "gpu"

    def __init__(

        self, *,

        link: int,

        up: bool,

        active: bool,

        remote_type: str,

        remote_bus_id: str | None,

        remote_index: int | None,

    ) -> None:
        _set(self, "link", link)
        _set(self, "up", up)
        _set(self, "active", active)
        _set(self, "remote_type", remote_type)
        _set(self, "remote_bus_id", remote_bus_id)
        _set(self, "remote_index", remote_index)


class Gpu(Value):
    __slots__ = (
        "index", "uuid", "serial", "bus_id", "minor_number", "module_id", "root_complex", "numa_node",
        "cpu_affinity", "links", "config",
    )
    index: int
    uuid: str
    serial: str
    bus_id: str  # DDDD:BB:DD.F, lower case
    minor_number: int
    module_id: int
    root_complex: str
    numa_node: int | None
    cpu_affinity: str | None
    links: tuple[Link, ...]  # empty unless the nvlink surface is enabled
    config: GpuConfig  # every per-GPU value after all layers

    def __init__(

        self, *,

        index: int,

        uuid: str,

        serial: str,

        bus_id: str,

        minor_number: int,

        module_id: int,

        root_complex: str,

        numa_node: int | None,

        cpu_affinity: str | None,

        links: tuple[Link, ...],

        config: GpuConfig,

    ) -> None:
        _set(self, "index", index)
        _set(self, "uuid", uuid)
        _set(self, "serial", serial)
        _set(self, "bus_id", bus_id)
        _set(self, "minor_number", minor_number)
        _set(self, "module_id", module_id)
        _set(self, "root_complex", root_complex)
        _set(self, "numa_node", numa_node)
        _set(self, "cpu_affinity", cpu_affinity)
        _set(self, "links", links)
        _set(self, "config", config)

    @property
    def failure_mode(self) -> str:
        """The failure in effect now; a delayed one is "healthy" until NVML starts it (see delayed_failure)."""
        return "healthy" if self.delayed_failure else self.config.failure.mode

    @property
    def delayed_failure(self) -> str | None:
        """The failure mode each process's NVML starts after some calls (failure.after_calls, probability)."""
        failure = self.config.failure
        if failure.mode != "healthy" and (failure.after_calls or failure.probability is not None):
            return failure.mode
        return None

    @property
    def lost(self) -> bool:
        return self.failure_mode in ("lost", "fallen_off_bus")


class Switch(Value):
    __slots__ = ("index", "uuid", "bus_id", "device_id", "root_complex", "numa_node", "pci_visible",)
    index: int
    uuid: str
    bus_id: str
    device_id: int
    root_complex: str | None
    numa_node: int | None
    pci_visible: bool

    def __init__(

        self, *,

        index: int,

        uuid: str,

        bus_id: str,

        device_id: int,

        root_complex: str | None,

        numa_node: int | None,

        pci_visible: bool,

    ) -> None:
        _set(self, "index", index)
        _set(self, "uuid", uuid)
        _set(self, "bus_id", bus_id)
        _set(self, "device_id", device_id)
        _set(self, "root_complex", root_complex)
        _set(self, "numa_node", numa_node)
        _set(self, "pci_visible", pci_visible)


class Hca(Value):
    __slots__ = (
        "index", "name", "bus_id", "device_id", "root_complex", "numa_node", "gpu_index", "node_guid", "port_guid",
        "lid",
    )
    index: int
    name: str  # mlx5_<n>
    bus_id: str
    device_id: int
    root_complex: str
    numa_node: int
    gpu_index: int | None
    node_guid: int
    port_guid: int
    lid: int

    def __init__(

        self, *,

        index: int,

        name: str,

        bus_id: str,

        device_id: int,

        root_complex: str,

        numa_node: int,

        gpu_index: int | None,

        node_guid: int,

        port_guid: int,

        lid: int,

    ) -> None:
        _set(self, "index", index)
        _set(self, "name", name)
        _set(self, "bus_id", bus_id)
        _set(self, "device_id", device_id)
        _set(self, "root_complex", root_complex)
        _set(self, "numa_node", numa_node)
        _set(self, "gpu_index", gpu_index)
        _set(self, "node_guid", node_guid)
        _set(self, "port_guid", port_guid)
        _set(self, "lid", lid)


class Node(Value):
    __slots__ = (
        "profile_name", "node_name", "system", "gpus", "switches", "hcas", "root_complexes", "numa_nodes", "nvlink",
        "infiniband", "surfaces",
    )
    profile_name: str
    node_name: str
    system: System
    gpus: tuple[Gpu, ...]
    switches: tuple[Switch, ...]
    hcas: tuple[Hca, ...]  # empty unless the ib surface is enabled
    root_complexes: tuple[RootComplex, ...]
    numa_nodes: tuple[NumaNode, ...]  # by id; every CPU list of the node names host CPUs (``model.numa``)
    nvlink: Nvlink | None
    infiniband: Infiniband | None
    surfaces: Mapping[str, SurfaceSettings]

    def __init__(

        self, *,

        profile_name: str,

        node_name: str,

        system: System,

        gpus: tuple[Gpu, ...],

        switches: tuple[Switch, ...],

        hcas: tuple[Hca, ...],

        root_complexes: tuple[RootComplex, ...],

        numa_nodes: tuple[NumaNode, ...],

        nvlink: Nvlink | None,

        infiniband: Infiniband | None,

        surfaces: Mapping[str, SurfaceSettings],

    ) -> None:
        _set(self, "profile_name", profile_name)
        _set(self, "node_name", node_name)
        _set(self, "system", system)
        _set(self, "gpus", gpus)
        _set(self, "switches", switches)
        _set(self, "hcas", hcas)
        _set(self, "root_complexes", root_complexes)
        _set(self, "numa_nodes", numa_nodes)
        _set(self, "nvlink", nvlink)
        _set(self, "infiniband", infiniband)
        _set(self, "surfaces", surfaces)

    @property
    def driver_version(self) -> str:
        return self.system.driver_version

    def surface(self, name: str) -> SurfaceSettings:
        return self.surfaces[name]

    @property
    def driver_loaded(self) -> bool:
        """The nvidia module is loaded: the gpu surface healthy, with GPUs on the PCI bus (with no
        NVIDIA device there the module refuses to load, as ``modprobe nvidia`` does)."""
        return self.surface("gpu").active and self.surface("pci").enabled

    def gpu_lost(self, gpu: Gpu) -> bool:
        """The driver has lost ``gpu``: its own fault, or the PCI bus failed under it (every GPU
        fallen off the bus; the pci surface shows their config space as all ones)."""
        return gpu.lost or self.surface("pci").state == "failed"

    def gpu(self, target: str | int) -> Gpu:
        """Find a GPU by index, UUID or PCI bus id (any case, 4- or 8-digit domain)."""
        text = str(target).strip().lower()
        for gpu in self.gpus:
            if text.isdigit() and int(text) == gpu.index:
                return gpu
            if text == gpu.uuid.lower() or normalise_bus_id(text) == gpu.bus_id:
                return gpu
        raise LookupError(f"no GPU {target!r} on this node (GPUs: 0-{len(self.gpus) - 1})")


def normalise_bus_id(text: str) -> str | None:
    """``1b:00.0``, ``00000000:1B:00.0`` -> ``0000:1b:00.0``; None if it is not a bus id."""
    parts = text.lower().split(":")
    if len(parts) == 2:
        parts = ["0000", *parts]
    if len(parts) != 3:
        return None
    try:
        domain = int(parts[0], 16)
        bus = int(parts[1], 16)
        dev, fn = parts[2].split(".")
        return f"{domain:04x}:{bus:02x}:{int(dev, 16):02x}.{int(fn, 16)}"
    except ValueError:
        return None
