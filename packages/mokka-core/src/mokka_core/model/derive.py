"""What a resolved node derives from its own values: PCI bus numbers, NVLink links, HCAs, module ids.

Shared by ``resolve`` (a node from its documents) and ``apply`` (an override laid over a node), so
a GPU's links follow the nvlink surface and the HCAs the ib surface however the node was made.
Pure: no pydantic, no disk.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import ConfigError
from .config import Nvlink
from .node import Gpu, Hca, Link, Node, RootComplex, SurfaceSettings, Switch, normalise_bus_id

ACTIVE_STATES = ("active", "up", "enabled")


def derive(node: Node, since: Node | None = None) -> Node:
    """``node`` with its links, HCAs and module ids recomputed from its other values.

    ``since``: the node ``node`` was made from by an override, which changes no GPU's identity or
    bus: its links stand while the nvlink surface's settings do, its HCAs while the ib surface's do.
    """
    gpus = tuple(_with_module_id(gpu) for gpu in node.gpus)
    if since is None or since.surface("nvlink") != node.surface("nvlink"):
        gpus = tuple(with_links(list(gpus), node.nvlink, node.switches, node.surface("nvlink")))
    # else each GPU has the links it had in ``since``, which is what they derive from (an override changes
    # no GPU's index or bus, nor the NVLink topology): the same link objects, so comparing nodes is cheap
    if since is not None and since.surface("ib") == node.surface("ib"):
        return node.replace(gpus=gpus, hcas=since.hcas)
    buses = BusMap(node.root_complexes)
    for switch in node.switches:
        if switch.pci_visible:
            buses.claim(switch.bus_id)
    for gpu in gpus:
        buses.claim(gpu.bus_id)
    hcas = tuple(allocate_hcas(node, gpus, buses))
    return node.replace(gpus=gpus, hcas=hcas)


def _with_module_id(gpu: Gpu) -> Gpu:
    platform = gpu.config.platform
    module_id = platform.module_id if platform is not None and platform.module_id else gpu.index + 1
    return gpu if gpu.module_id == module_id else gpu.replace(module_id=module_id)


class BusMap:
    """Which root complex owns a bus, and which bus numbers are still free."""

    def __init__(self, roots: Sequence[RootComplex]) -> None:
        self.roots = roots
        self.used: set[tuple[int, int]] = {(r.domain, r.bus) for r in roots}  # buses not to allocate
        self.claimed: set[str] = set()  # exact functions already taken

    def root_of(self, bus_id: str) -> RootComplex:
        domain, bus = domain_bus(bus_id)
        owner = None
        for root in self.roots:
            if root.domain == domain and root.bus <= bus:
                owner = root
        if owner is None:
            raise LookupError(f"no root complex in pcie_topology covers {bus_id} (roots: {[r.id for r in self.roots]})")
        return owner

    def claim(self, bus_id: str) -> bool:
        if bus_id in self.claimed:
            return False
        self.claimed.add(bus_id)
        self.used.add(domain_bus(bus_id))
        return True

    def span(self, root: RootComplex) -> range:
        following = [r.bus for r in self.roots if r.domain == root.domain and r.bus > root.bus]
        return range(root.bus + 1, min(following, default=0x100))

    def allocate(self, root: RootComplex, near: int | None = None) -> str:
        """The first free bus of ``root`` (searching down from ``near`` first, for HCAs beside a GPU)."""
        candidates = list(self.span(root))
        if near is not None:
            candidates = [b for b in reversed(candidates) if b < near] + candidates
        for bus in candidates:
            if (root.domain, bus) not in self.used:
                bus_id = f"{root.domain:04x}:{bus:02x}:00.0"
                self.claim(bus_id)
                return bus_id
        raise LookupError(f"root complex {root.id} has no free bus number left")


def domain_bus(bus_id: str) -> tuple[int, int]:
    domain, bus, _ = bus_id.split(":")
    return int(domain, 16), int(bus, 16)


def with_links(gpus: list[Gpu], nvlink: Nvlink | None, switches: Sequence[Switch],
               settings: SurfaceSettings) -> list[Gpu]:
    """Each GPU's NVLink links as the profile describes them; none while the nvlink surface is disabled."""
    if nvlink is None or not settings.enabled:
        return [gpu.replace(links=()) for gpu in gpus]
    healthy = settings.state == "healthy"
    by_bus = {gpu.bus_id: gpu.index for gpu in gpus}
    explicit = {entry.index: entry.links for entry in nvlink.device_links}
    if nvlink.links and 0 not in explicit:
        explicit[0] = nvlink.links
    default_up = nvlink.defaults.state.lower() in ACTIVE_STATES
    result = []
    for gpu in gpus:
        links: list[Link] = []
        if gpu.index in explicit:
            for link in explicit[gpu.index]:
                remote_type = link.remote_device_type.lower()
                remote_bus = None if link.remote_pci_bus_id.lower() in ("", "n/a") else link.remote_pci_bus_id.lower()
                remote_index = link.remote_index
                if remote_type == "gpu" and remote_index is None and remote_bus is not None:
                    remote_index = by_bus.get(normalise_bus_id(remote_bus) or "")
                up = link.state.lower() in ACTIVE_STATES if link.state else default_up
                links.append(Link(link=link.link, up=up, active=up and healthy, remote_type=remote_type,
                                  remote_bus_id=remote_bus, remote_index=remote_index))
        elif switches and nvlink.links_per_gpu:
            for k in range(nvlink.links_per_gpu):
                switch = switches[k % len(switches)]
                links.append(Link(link=k, up=default_up, active=default_up and healthy, remote_type="switch",
                                  remote_bus_id=switch.bus_id, remote_index=None))
        result.append(gpu.replace(links=tuple(links)))
    return result


def allocate_hcas(node: Node, gpus: Sequence[Gpu], buses: BusMap) -> list[Hca]:
    """The node's HCAs, each on a free bus beside its GPU; none while the ib surface is disabled."""
    ib = node.infiniband
    if ib is None or not ib.enabled or not node.surface("ib").enabled:
        return []
    from . import identity  # hashlib: only where HCAs are made, not on every override

    count = ib.hca_count or len(gpus) * ib.hcas_per_gpu
    per_gpu = max(ib.hcas_per_gpu, 1)
    roots = {root.id: root for root in buses.roots}
    hcas = []
    for index in range(count):
        gpu = gpus[min(index // per_gpu, len(gpus) - 1)] if gpus else None
        root = roots[gpu.root_complex] if gpu else buses.roots[index % len(buses.roots)]
        near = domain_bus(gpu.bus_id)[1] if gpu else None
        try:
            bus_id = buses.allocate(root, near=near)
        except LookupError as exc:
            raise ConfigError(node.profile_name, [("infiniband", f"no PCI bus for HCA {index}: {exc}; use fewer GPUs "
                                                                 "or HCAs, or add root complexes")]) from None
        node_guid, port_guid = identity.hca_guids(ib.guid_prefix, node.node_name, index)
        hcas.append(Hca(index=index, name=f"mlx5_{index}", bus_id=bus_id, device_id=ib.pci_device_id,
                        root_complex=root.id, numa_node=root.numa_node, gpu_index=gpu.index if gpu else None,
                        node_guid=node_guid, port_guid=port_guid, lid=identity.hca_lid(node.node_name, index, count)))
    return hcas
