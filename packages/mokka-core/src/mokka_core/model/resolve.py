"""``resolve()``: a node from its documents — profile, GPU count, node name, topology overlay, surfaces.

Every document is validated here, with pydantic (``schema``), and every default applied here, once:
the result is the plain, immutable :class:`~.node.Node` every surface renders from.  The runtime
override enters through :func:`~.apply.apply`, after :func:`canonical_override` has checked its
values against the node, exactly as the daemon, ``mokka run`` and ``nvml-mock-ctl`` do it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from ..errors import ConfigError
from ..schema.loader import _problems
from ..schema.merge import deep_merge, merge_all
from ..schema.profile import MAX_GPUS, DeviceConfig, Profile
from ..schema.surfaces import SURFACES
from . import identity
from .apply import apply
from .codec import decode, encode
from .config import GpuConfig, Infiniband, Nvlink, System
from .derive import BusMap, derive
from .inputs import Inputs
from .names import node_name_problem
from .node import DEFAULT_NODE_NAME, Gpu, Node, NumaNode, RootComplex, SurfaceSettings, Switch
from .numa import HostCpus, format_cpulist, parse_cpulist

IDENTITY_KEYS = ("index", "uuid", "minor_number", "grace_cpu_pair")


def resolve(inputs: Inputs) -> Node:
    """The node with its override (``inputs.override``, its values checked against the node first)."""
    base, doc = resolve_parts(inputs)
    return apply(base, doc)


def resolve_parts(inputs: Inputs) -> tuple[Node, dict[str, Any]]:
    """The node without its override, and the override as ``apply`` takes it (what a snapshot records)."""
    base = resolve_base(inputs)
    if inputs.override is None:
        return base, {}
    document = inputs.override.model_dump(exclude_unset=True)
    return base, canonical_override(base, document, inputs.override_source, inputs.profile_source)


def resolve_base(inputs: Inputs) -> Node:
    """The node from its profile, overlay and surface settings, before the override file."""
    profile = inputs.profile
    source = inputs.profile_source
    node_name = _node_name(inputs)
    name = profile.name or "custom"
    count = _gpu_count(profile, inputs.gpus, source)
    roots, numa_nodes = _on_host(_root_complexes(profile), profile, inputs.host_cpus)
    buses = BusMap(roots)

    switches = _switches(profile, name, node_name, buses, source)
    entries = {entry.index: entry for entry in profile.devices}
    if inputs.gpus is None:  # a smaller --gpus drops the entries past it; the profile's own count may not
        beyond = [f"devices[{n}].index" for n, entry in enumerate(profile.devices) if entry.index >= count]
        if beyond:
            raise ConfigError(source, [(where, f"GPU index is not below the GPU count {count}") for where in beyond])
    bus_ids = _gpu_bus_ids(count, entries, buses, source)
    placement = inputs.overlay.placement(node_name) if inputs.overlay else None

    gpus = []
    for index in range(count):
        entry = entries.get(index)
        validated = _device_config(profile, entry, index, placement, source)
        config = decode(GpuConfig, validated.model_dump(exclude_none=True))
        root = buses.root_of(bus_ids[index])
        gpus.append(
            Gpu(
                index=index,
                uuid=entry.uuid if entry and entry.uuid else identity.gpu_uuid(name, node_name, index),
                serial=_serial(entry, name, node_name, index),
                bus_id=bus_ids[index],
                minor_number=entry.minor_number if entry and entry.minor_number is not None else index,
                module_id=index + 1,
                root_complex=root.id,
                numa_node=root.numa_node if profile.pcie_topology else None,
                cpu_affinity=root.cpu_affinity if profile.pcie_topology else None,
                links=(),
                config=config,
            )
        )
    _unique_uuids(gpus, source)
    node = Node(
        profile_name=name,
        node_name=node_name,
        system=decode(System, {**profile.system.model_dump(), "num_devices": count}),
        gpus=tuple(gpus),
        switches=tuple(switches),
        hcas=(),
        root_complexes=tuple(roots),
        numa_nodes=numa_nodes,
        nvlink=decode(Nvlink, profile.nvlink.model_dump()) if profile.nvlink else None,
        infiniband=decode(Infiniband, profile.infiniband.model_dump()) if profile.infiniband else None,
        surfaces=_surfaces(profile, inputs),
    )
    return derive(node)


def canonical_override(node: Node, doc: Mapping[str, Any], source: str, profile_source: str = "profile",
                       ) -> dict[str, Any]:
    """``doc`` (an override document whose keys are checked) with its values validated against ``node``.

    Each GPU's configuration with the override laid over it is validated as a whole, and a bad
    value is reported in the override's terms (``all.<path>`` or ``devices.<i>.<path>``).  The
    result holds the values as validation gives them (``"0x2330"`` -> 9008), ready for ``apply``.
    """
    out: dict[str, Any] = {key: value for key, value in doc.items() if key not in ("all", "devices")}
    everyone = doc.get("all")
    devices = doc.get("devices") or {}
    absent = sorted(set(map(str, devices)) - {str(gpu.index) for gpu in node.gpus})
    if absent:
        raise ConfigError(source, [(f"devices.{key}", f"no GPU {key} on this node (GPUs 0..{len(node.gpus) - 1})")
                                   for key in absent])
    if everyone and node.gpus:
        out["all"] = _project(everyone, _validated(node.gpus[0], everyone, doc, source, profile_source))
    canonical_devices = {}
    for gpu in node.gpus:
        own = devices.get(str(gpu.index))
        patch = merge_all(everyone, own)
        if not patch:
            continue  # nothing laid over this GPU: its configuration was validated with the profile
        merged = _validated(gpu, patch, doc, source, profile_source)
        if own:
            canonical_devices[str(gpu.index)] = _project(own, merged)
    if canonical_devices:
        out["devices"] = canonical_devices
    return out


def _validated(gpu: Gpu, patch: Mapping[str, Any] | None, doc: Mapping[str, Any], source: str,
               profile_source: str) -> dict[str, Any]:
    merged = deep_merge(encode(gpu.config), patch or {})
    try:
        return DeviceConfig.model_validate(merged).model_dump()
    except ValidationError as exc:
        raise _attribute(_problems(exc, merged), gpu.index, doc, source, profile_source) from None


def _project(patch: Any, validated: Any) -> Any:
    """The validated values at the places ``patch`` names (keys a block or a list item leaves out stay out)."""
    if isinstance(patch, Mapping) and isinstance(validated, Mapping):
        return {key: _project(value, validated.get(key)) for key, value in patch.items()}
    if isinstance(patch, list) and isinstance(validated, list) and len(patch) == len(validated):
        return [_project(item, inner) for item, inner in zip(patch, validated, strict=True)]
    return validated


def _unique_uuids(gpus: list[Gpu], source: str) -> None:
    """Two GPUs with one UUID: nvidia-smi lists both, and a UUID lookup finds the first (no real node has it)."""
    seen: dict[str, int] = {}
    for gpu in gpus:
        if gpu.uuid.lower() in seen:
            raise ConfigError(source, [(f"devices[{gpu.index}].uuid", f"{gpu.uuid} is GPU {seen[gpu.uuid.lower()]}'s "
                                                                     "too; UUIDs are unique")])
        seen[gpu.uuid.lower()] = gpu.index


def _node_name(inputs: Inputs) -> str:
    name = inputs.node_name or os.environ.get("NODE_NAME") or DEFAULT_NODE_NAME
    problem = node_name_problem(name)
    if problem:
        raise ConfigError("--node-name / NODE_NAME", [("node_name", problem)])
    return name


def _gpu_count(profile: Profile, requested: int | None, source: str) -> int:
    if requested is not None:
        if requested < 1:
            raise ConfigError(source, [("count", f"must be at least 1, got {requested}")])
        if requested > MAX_GPUS:
            raise ConfigError(source, [("count", f"must be at most {MAX_GPUS} (what the mock library holds), "
                                                 f"got {requested}")])
        return requested
    if profile.system.num_devices:
        return profile.system.num_devices
    return len(profile.devices) or 8


def _device_config(profile: Profile, entry: Any, index: int, placement: tuple[str, int] | None,
                   source: str) -> DeviceConfig:
    defaults = profile.device_defaults.model_dump(exclude_unset=True)
    per_device = entry.model_dump(exclude_unset=True, exclude=set(IDENTITY_KEYS)) if entry else {}
    overlay: dict[str, Any] = {}
    has_fabric = "fabric" in defaults or "fabric" in per_device
    if placement and has_fabric:
        overlay = {"fabric": {"cluster_uuid": placement[0], "clique_id": placement[1]}}
    merged = merge_all(defaults, per_device, overlay)
    try:
        return DeviceConfig.model_validate(merged)
    except ValidationError as exc:
        prefix = f"devices[{index}]"
        problems = _problems(exc, merged)
        raise ConfigError(source, [(f"{prefix}.{path}" if path else prefix, m) for path, m in problems]) from None


def _attribute(problems: list[tuple[str, str]], index: int, doc: Mapping[str, Any], source: str,
               profile_source: str) -> ConfigError:
    """Name the layer a bad merged value came from: override devices.<i>, override all, or the profile."""
    from_override = []
    for path, message in problems:
        if _has_path((doc.get("devices") or {}).get(str(index)), path):
            from_override.append((f"devices.{index}.{path}", message))
        elif _has_path(doc.get("all"), path):
            from_override.append((f"all.{path}", message))
    if from_override:
        return ConfigError(source, from_override)
    prefix = f"devices[{index}]"
    return ConfigError(profile_source, [(f"{prefix}.{path}" if path else prefix, m) for path, m in problems])


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


def _serial(entry: Any, profile: str, node_name: str, index: int) -> str:
    if entry is not None and "serial" in entry.model_fields_set and entry.serial:
        return str(entry.serial)
    return identity.board_serial(profile, node_name, index)


def _root_complexes(profile: Profile) -> list[RootComplex]:
    topology = profile.pcie_topology
    if topology is None or not topology.root_complexes:
        return [RootComplex(id="pci0000:00", domain=0, bus=0, numa_node=0, cpu_affinity="0-63")]
    roots = []
    for rc in topology.root_complexes:
        domain, bus = (int(part, 16) for part in rc.id[3:].split(":"))
        first = rc.numa_node * topology.cores_per_numa
        cpus = rc.cpu_affinity or f"{first}-{first + topology.cores_per_numa - 1}"
        roots.append(RootComplex(id=rc.id, domain=domain, bus=bus, numa_node=rc.numa_node, cpu_affinity=cpus))
    return sorted(roots, key=lambda r: (r.domain, r.bus))


def _on_host(roots: list[RootComplex], profile: Profile, host: tuple[int, ...] | None,
             ) -> tuple[list[RootComplex], tuple[NumaNode, ...]]:
    """The root complexes with their CPU lists folded onto ``host``, and the NUMA nodes they sit on."""
    board: dict[int, set[int]] = {}
    for root in roots:
        board.setdefault(root.numa_node, set()).update(parse_cpulist(root.cpu_affinity))
    layout = HostCpus(board, host)
    memory = profile.system.memory_bytes // len(board)
    nodes = tuple(NumaNode(id=node, cpus=format_cpulist(cpus), memory_bytes=memory)
                  for node, cpus in layout.nodes.items())
    mapped = [root.replace(cpu_affinity=format_cpulist(layout.cpus(root.numa_node, parse_cpulist(root.cpu_affinity))))
              for root in roots]
    return mapped, nodes


def _gpu_bus_ids(count: int, entries: dict[int, Any], buses: BusMap, source: str) -> list[str]:
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


def _allocate_anywhere(buses: BusMap, source: str, index: int) -> str:
    for root in buses.roots:
        try:
            return buses.allocate(root)
        except LookupError:
            continue
    raise ConfigError(source, [("count", f"no free PCI bus number left for GPU {index}; add root complexes")])


def _switches(profile: Profile, name: str, node_name: str, buses: BusMap, source: str) -> list[Switch]:
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
            Switch(
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


def _surfaces(profile: Profile, inputs: Inputs) -> dict[str, SurfaceSettings]:
    """Defaults from what the node type has, then the settings given (command line, node file)."""
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
    result = {}
    for name in SURFACES:
        settings = SurfaceSettings(enabled=present[name])
        given = inputs.surfaces.get(name, {})
        if (set(given) - {"enabled", "state"} or not isinstance(given.get("enabled", True), bool)
                or given.get("state", "healthy") not in ("healthy", "failed")):
            expected = "expected enabled: true|false, state: healthy|failed"
            raise ConfigError("surfaces", [(name, f"{expected}, got {given!r}")])
        result[name] = settings.replace(**given)
    return result
