"""Node state: the one immutable object every surface renders from.

``resolve()`` folds a profile, a GPU count, a node name, the topology overlay,
the runtime override and the surface settings into a :class:`NodeState`.  Two
surfaces that read the same node state always agree (a GPU fallen off the bus
is lost in NVML *and* reads 0xff in PCI config space).
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import ValidationError

from ..errors import ConfigError
from ..schema.loader import _problems
from ..schema.merge import merge_all
from ..schema.overlays import SURFACES, Override, SurfaceHealth, SurfaceName
from ..schema.profile import DeviceConfig, Infiniband, Model, Nvlink, Profile, System
from . import identity
from .inputs import Inputs
from .records import GpuBehaviour, NodeBehaviour, SurfaceBehaviour, normalise_bus_id

DEFAULT_NODE_NAME = "mokka-node"
IDENTITY_KEYS = ("index", "uuid", "minor_number", "grace_cpu_pair")


class SurfaceSettings(SurfaceBehaviour, Model):
    enabled: bool = True
    state: SurfaceHealth = "healthy"


class RootComplexState(Model):
    id: str  # pciDDDD:BB
    domain: int
    bus: int
    numa_node: int
    cpu_affinity: str


class LinkState(Model):
    link: int
    active: bool
    remote_type: str  # "gpu" | "switch" | "cpu" | "none"
    remote_bus_id: str | None
    remote_index: int | None  # GPU index when remote_type == "gpu"


class GpuState(GpuBehaviour, Model):
    index: int
    uuid: str
    serial: str
    bus_id: str  # DDDD:BB:DD.F, lower case
    minor_number: int
    module_id: int
    root_complex: str
    numa_node: int | None
    cpu_affinity: str | None
    links: tuple[LinkState, ...]
    config: DeviceConfig  # every per-GPU value after all layers


class SwitchState(Model):
    index: int
    uuid: str
    bus_id: str
    device_id: int
    root_complex: str | None
    numa_node: int | None
    pci_visible: bool


class HcaState(Model):
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


class NodeState(NodeBehaviour, Model):
    profile_name: str
    node_name: str
    system: System
    gpus: tuple[GpuState, ...]
    switches: tuple[SwitchState, ...]
    hcas: tuple[HcaState, ...]
    root_complexes: tuple[RootComplexState, ...]
    nvlink: Nvlink | None
    infiniband: Infiniband | None
    surfaces: dict[SurfaceName, SurfaceSettings]

    def surface(self, name: str) -> SurfaceSettings:
        return self.surfaces[name]  # type: ignore[index]

    def gpu(self, target: str | int) -> GpuState:
        return super().gpu(target)  # type: ignore[no-any-return]


def resolve(inputs: Inputs) -> NodeState:
    profile = inputs.profile
    source = inputs.profile_source
    node_name = _node_name(inputs)
    name = profile.name or "custom"
    count = _gpu_count(profile, inputs.gpus, source)
    roots = _root_complexes(profile)
    buses = _BusMap(roots)

    switches = _switches(profile, name, node_name, buses, source)
    entries = {entry.index: entry for entry in profile.devices}
    bus_ids = _gpu_bus_ids(count, entries, buses, source)
    surfaces = _surfaces(profile, inputs)
    override = inputs.override or Override()
    placement = inputs.overlay.placement(node_name) if inputs.overlay else None

    gpus = []
    for index in range(count):
        entry = entries.get(index)
        config = _device_config(profile, entry, index, override, placement, inputs)
        root = buses.root_of(bus_ids[index])
        gpus.append(
            GpuState(
                index=index,
                uuid=entry.uuid if entry and entry.uuid else identity.gpu_uuid(name, node_name, index),
                serial=_serial(config, entry, name, node_name, index),
                bus_id=bus_ids[index],
                minor_number=entry.minor_number if entry and entry.minor_number is not None else index,
                module_id=(config.platform.module_id if config.platform and config.platform.module_id else index + 1),
                root_complex=root.id,
                numa_node=root.numa_node if profile.pcie_topology else None,
                cpu_affinity=root.cpu_affinity if profile.pcie_topology else None,
                links=(),
                config=config,
            )
        )
    gpus = _with_links(gpus, profile.nvlink, switches, surfaces["nvlink"], source)
    hcas = _hcas(profile, gpus, buses, node_name, surfaces)
    return NodeState(
        profile_name=name,
        node_name=node_name,
        system=profile.system.model_copy(update={"num_devices": count}),
        gpus=tuple(gpus),
        switches=tuple(switches),
        hcas=tuple(hcas),
        root_complexes=tuple(roots),
        nvlink=profile.nvlink,
        infiniband=profile.infiniband,
        surfaces=surfaces,
    )


def base_configs(inputs: Inputs) -> list[dict[str, Any]]:
    """Each GPU's configuration before the override file, as JSON (what a node's snapshot keeps)."""
    profile = inputs.profile
    entries = {entry.index: entry for entry in profile.devices}
    placement = inputs.overlay.placement(_node_name(inputs)) if inputs.overlay else None
    count = _gpu_count(profile, inputs.gpus, inputs.profile_source)
    return [_device_config(profile, entries.get(index), index, Override(), placement, inputs).model_dump(mode="json")
            for index in range(count)]


def _node_name(inputs: Inputs) -> str:
    return inputs.node_name or os.environ.get("NODE_NAME") or DEFAULT_NODE_NAME


def _gpu_count(profile: Profile, requested: int | None, source: str) -> int:
    if requested is not None:
        if requested < 1:
            raise ConfigError(source, [("count", f"must be at least 1, got {requested}")])
        return requested
    if profile.system.num_devices:
        return profile.system.num_devices
    return len(profile.devices) or 8


def _device_config(
    profile: Profile,
    entry: Any,
    index: int,
    override: Override,
    placement: tuple[str, int] | None,
    inputs: Inputs,
) -> DeviceConfig:
    defaults = profile.device_defaults.model_dump(exclude_unset=True)
    per_device = entry.model_dump(exclude_unset=True, exclude=set(IDENTITY_KEYS)) if entry else {}
    overlay: dict[str, Any] = {}
    has_fabric = "fabric" in defaults or "fabric" in per_device
    if placement and has_fabric:
        overlay = {"fabric": {"cluster_uuid": placement[0], "clique_id": placement[1]}}
    layers = [
        defaults,
        per_device,
        overlay,
        override.all,
        override.devices.get(str(index)),
    ]
    merged = merge_all(*layers)
    try:
        return DeviceConfig.model_validate(merged)
    except ValidationError as exc:
        raise _attribute(_problems(exc, merged), index, override, inputs) from None


def _attribute(problems: list[tuple[str, str]], index: int, override: Override, inputs: Inputs) -> ConfigError:
    """Name the layer a bad merged value came from: override devices.<i>, override all, or the profile."""
    from_override = []
    for path, message in problems:
        if _has_path(override.devices.get(str(index)), path):
            from_override.append((f"devices.{index}.{path}", message))
        elif _has_path(override.all, path):
            from_override.append((f"all.{path}", message))
    if from_override:
        return ConfigError(inputs.override_source, from_override)
    prefix = f"devices[{index}]"
    return ConfigError(inputs.profile_source, [(f"{prefix}.{path}" if path else prefix, m) for path, m in problems])


def _has_path(data: Any, path: str) -> bool:
    for part in path.replace("[", ".[").split("."):
        if not part:
            continue
        if part.startswith("["):
            return True  # inside a list the override replaced wholesale
        if not isinstance(data, dict) or part not in data:
            return False
        data = data[part]
    return True


def _serial(config: DeviceConfig, entry: Any, profile: str, node_name: str, index: int) -> str:
    if entry is not None and "serial" in entry.model_fields_set and entry.serial:
        return str(entry.serial)
    return identity.board_serial(profile, node_name, index)


def _root_complexes(profile: Profile) -> list[RootComplexState]:
    topology = profile.pcie_topology
    if topology is None or not topology.root_complexes:
        return [RootComplexState(id="pci0000:00", domain=0, bus=0, numa_node=0, cpu_affinity="0-63")]
    roots = []
    for rc in topology.root_complexes:
        domain, bus = (int(part, 16) for part in rc.id[3:].split(":"))
        first = rc.numa_node * topology.cores_per_numa
        cpus = rc.cpu_affinity or f"{first}-{first + topology.cores_per_numa - 1}"
        roots.append(RootComplexState(id=rc.id, domain=domain, bus=bus, numa_node=rc.numa_node, cpu_affinity=cpus))
    return sorted(roots, key=lambda r: (r.domain, r.bus))


class _BusMap:
    """Which root complex owns a bus, and which bus numbers are still free."""

    def __init__(self, roots: list[RootComplexState]) -> None:
        self.roots = roots
        self.used: set[tuple[int, int]] = {(r.domain, r.bus) for r in roots}  # buses not to allocate
        self.claimed: set[str] = set()  # exact functions already taken

    def root_of(self, bus_id: str) -> RootComplexState:
        domain, bus = _domain_bus(bus_id)
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
        self.used.add(_domain_bus(bus_id))
        return True

    def span(self, root: RootComplexState) -> range:
        following = [r.bus for r in self.roots if r.domain == root.domain and r.bus > root.bus]
        return range(root.bus + 1, min(following, default=0x100))

    def allocate(self, root: RootComplexState, near: int | None = None) -> str:
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


def _domain_bus(bus_id: str) -> tuple[int, int]:
    domain, bus, _ = bus_id.split(":")
    return int(domain, 16), int(bus, 16)


def _gpu_bus_ids(count: int, entries: dict[int, Any], buses: _BusMap, source: str) -> list[str]:
    bus_ids: dict[int, str] = {}
    for index, entry in sorted(entries.items()):
        if index >= count or not entry.pci or not entry.pci.bus_id:
            continue
        bus_id = entry.pci.bus_id
        try:
            buses.root_of(bus_id)
        except LookupError as exc:
            raise ConfigError(source, [(f"devices[{index}].pci.bus_id", str(exc))]) from None
        if not buses.claim(bus_id):
            raise ConfigError(source, [(f"devices[{index}].pci.bus_id", f"bus {bus_id} is used twice")])
        bus_ids[index] = bus_id
    missing = [index for index in range(count) if index not in bus_ids]
    for n, index in enumerate(missing):
        # spread extra GPUs over the root complexes (and so NUMA nodes) round-robin
        root = buses.roots[n % len(buses.roots)]
        try:
            bus_ids[index] = buses.allocate(root)
        except LookupError:
            bus_ids[index] = _allocate_anywhere(buses, source, index)
    return [bus_ids[index] for index in range(count)]


def _allocate_anywhere(buses: _BusMap, source: str, index: int) -> str:
    for root in buses.roots:
        try:
            return buses.allocate(root)
        except LookupError:
            continue
    raise ConfigError(source, [("count", f"no free PCI bus number left for GPU {index}; add root complexes")])


def _switches(profile: Profile, name: str, node_name: str, buses: _BusMap, source: str) -> list[SwitchState]:
    if not profile.nvlink:
        return []
    switches = []
    for index, switch in enumerate(profile.nvlink.switches):
        root = None
        if switch.pci_visible:
            try:
                root = buses.root_of(switch.bdf)
            except LookupError as exc:
                raise ConfigError(source, [(f"nvlink.switches[{index}].bdf", str(exc))]) from None
            if not buses.claim(switch.bdf):
                raise ConfigError(source, [(f"nvlink.switches[{index}].bdf", f"bus {switch.bdf} is used twice")])
        switches.append(
            SwitchState(
                index=index,
                uuid=switch.uuid or identity.switch_uuid(name, node_name, index),
                bus_id=switch.bdf,
                device_id=switch.device_id,
                root_complex=root.id if root else None,
                numa_node=switch.numa_node if switch.numa_node is not None else (root.numa_node if root else None),
                pci_visible=switch.pci_visible,
            )
        )
    return switches


def _with_links(
    gpus: list[GpuState], nvlink: Nvlink | None, switches: list[SwitchState], settings: SurfaceSettings, source: str
) -> list[GpuState]:
    if nvlink is None or not settings.enabled:
        return gpus
    by_bus = {gpu.bus_id: gpu.index for gpu in gpus}
    explicit = {entry.index: entry.links for entry in nvlink.device_links}
    if nvlink.links and 0 not in explicit:
        explicit[0] = nvlink.links
    default_active = nvlink.defaults.state.lower() in ("active", "up", "enabled")
    result = []
    for gpu in gpus:
        links: list[LinkState] = []
        if gpu.index in explicit:
            for link in explicit[gpu.index]:
                remote_type = link.remote_device_type.lower()
                remote_bus = None if link.remote_pci_bus_id.lower() in ("", "n/a") else link.remote_pci_bus_id.lower()
                remote_index = link.remote_index
                if remote_type == "gpu" and remote_index is None and remote_bus is not None:
                    remote_index = by_bus.get(normalise_bus_id(remote_bus) or "")
                state = link.state.lower() if link.state else ("active" if default_active else "inactive")
                links.append(
                    LinkState(
                        link=link.link,
                        active=state in ("active", "up", "enabled") and settings.state == "healthy",
                        remote_type=remote_type,
                        remote_bus_id=remote_bus,
                        remote_index=remote_index,
                    )
                )
        elif switches and nvlink.links_per_gpu:
            for k in range(nvlink.links_per_gpu):
                switch = switches[k % len(switches)]
                links.append(
                    LinkState(
                        link=k,
                        active=default_active and settings.state == "healthy",
                        remote_type="switch",
                        remote_bus_id=switch.bus_id,
                        remote_index=None,
                    )
                )
        result.append(gpu.model_copy(update={"links": tuple(links)}))
    return result


def _hcas(
    profile: Profile, gpus: list[GpuState], buses: _BusMap, node_name: str, surfaces: dict[SurfaceName, SurfaceSettings]
) -> list[HcaState]:
    ib = profile.infiniband
    if ib is None or not ib.enabled or not surfaces["ib"].enabled:
        return []
    count = ib.hca_count or len(gpus) * ib.hcas_per_gpu
    per_gpu = max(ib.hcas_per_gpu, 1)
    hcas = []
    roots = {root.id: root for root in buses.roots}
    for index in range(count):
        gpu = gpus[min(index // per_gpu, len(gpus) - 1)] if gpus else None
        root = roots[gpu.root_complex] if gpu else buses.roots[index % len(buses.roots)]
        near = _domain_bus(gpu.bus_id)[1] if gpu else None
        bus_id = buses.allocate(root, near=near)
        node_guid, port_guid = identity.hca_guids(ib.guid_prefix, node_name, index)
        hcas.append(
            HcaState(
                index=index,
                name=f"mlx5_{index}",
                bus_id=bus_id,
                device_id=ib.pci_device_id,
                root_complex=root.id,
                numa_node=root.numa_node,
                gpu_index=gpu.index if gpu else None,
                node_guid=node_guid,
                port_guid=port_guid,
                lid=identity.hca_lid(node_name, index, count),
            )
        )
    return hcas


def _surfaces(profile: Profile, inputs: Inputs) -> dict[SurfaceName, SurfaceSettings]:
    """Defaults from what the node type has, then CLI settings, then the override file."""
    has_fabric = profile.device_defaults.fabric is not None or any(d.fabric for d in profile.devices)
    has_switches = bool(profile.nvlink and profile.nvlink.switches)
    present = {
        "gpu": True,
        "pci": True,
        "cdi": True,
        "imex": has_fabric and bool(profile.nvlink and profile.nvlink.c2c_enabled),
        "nvlink": profile.nvlink is not None,
        "fabricmanager": has_fabric or has_switches,
        "ib": bool(profile.infiniband and profile.infiniband.enabled),
    }
    override = inputs.override or Override()
    result: dict[SurfaceName, SurfaceSettings] = {}
    for name in SURFACES:
        settings: dict[str, Any] = {"enabled": present[name]}
        settings.update(inputs.surfaces.get(name, {}))
        patch = override.surfaces.get(name)  # type: ignore[call-overload]
        if patch is not None:
            settings.update(patch.model_dump(exclude_none=True))
        result[name] = SurfaceSettings.model_validate(settings)  # type: ignore[index]
    return result
