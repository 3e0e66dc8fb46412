"""A profile from a real capture: the closest built-in board, with every value the capture states laid over it.

The board is chosen by the first GPU's PCI device id (then its product name); what the XML cannot
say (topology, NVLink, NUMA, InfiniBand, DMI, the MIG profile table) stays the board's and is
listed in the header comment of the generated file, with the capture's model facts that have no
profile key.  GPU 0's values go into ``device_defaults``, a GPU's own differences into ``devices[i]``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, get_args

import yaml

from ..builtin import BUILTIN_PROFILES, builtin_text, load_builtin
from ..merge import deep_merge
from ..profile import Architecture, Brand, Mode
from ..yamldoc import parse_yaml
from .facts import WITHDRAWN, Capture, CaptureError, model_facts

NOT_AVAILABLE = {"N/A", "", WITHDRAWN}
#: what a profile keeps of the board it starts from (never stated by ``nvidia-smi -q -x``)
FROM_THE_BOARD = {
    "nvlink": "NVLink links, switches and peers",
    "pcie_topology": "PCIe root complexes, NUMA layout and CPU affinity",
    "infiniband": "InfiniBand HCAs",
    "system.dmi": "DMI of the machine",
    "system.memory_bytes": "host memory",
    "device_defaults.mig.gpu_instance_profiles": "the MIG profile table",
}


def _mode(text: str) -> str:
    return _one_of(get_args(Mode))(text)


def _number(unit: str) -> Callable[[str], int]:
    def convert(text: str) -> int:
        match = re.fullmatch(rf"(-?\d+(?:\.\d+)?) ?{unit}", text)
        if match is None:
            raise ValueError(f"expected a number of {unit}, got {text!r}")
        return round(float(match.group(1)))

    return convert


def _mib(text: str) -> int:
    return _number("MiB")(text) << 20


def _watts(text: str) -> int:
    return round(float(text.removesuffix(" W")) * 1000)


class Unrepresentable(ValueError):
    """A well-formed value the profile format has no word for (a brand or architecture newer than Mokka)."""


def _one_of(choices: Iterable[str]) -> Callable[[str], str]:
    allowed = set(choices)

    def convert(text: str) -> str:
        word = "_".join(text.lower().replace("-", "").split())
        if word not in allowed:
            raise Unrepresentable(text)
        return word

    return convert


def _table(words: dict[str, str]) -> Callable[[str], str]:
    def convert(text: str) -> str:
        if text not in words:
            raise Unrepresentable(text)
        return words[text]

    return convert


VIRTUALIZATION = {"None": "none", "Pass-Through": "passthrough", "VGPU": "vgpu", "Host VGPU": "host_vgpu",
                  "Host VSGA": "host_vsga"}
COMPUTE_MODES = {"Default": "default", "Exclusive_Thread": "exclusive_thread", "Prohibited": "prohibited",
                 "Exclusive_Process": "exclusive_process"}
MHZ = _number("MHz")


@dataclass(frozen=True)
class Mapping:
    fact: str  # normalised element path
    key: str  # profile key path below a device entry
    convert: Callable[[str], Any] = str
    not_available: Any = None  # the key's value where the capture says N/A (None: the board's value stays)


#: capture element -> profile key, for every model fact the profile format can say
GPU_KEYS = (
    Mapping("product_name", "name"),
    Mapping("product_brand", "brand", _one_of(get_args(Brand))),
    Mapping("product_architecture", "architecture", _one_of(get_args(Architecture))),
    Mapping("display_mode", "display.mode", _mode),
    Mapping("display_active", "display.active", _mode),
    Mapping("persistence_mode", "persistence_mode", _mode),
    Mapping("mig_mode/current_mig", "mig.mode_current", _mode),
    Mapping("mig_mode/pending_mig", "mig.mode_pending", _mode),
    Mapping("accounting_mode", "accounting.mode", _mode),
    Mapping("accounting_mode_buffer_size", "accounting.buffer_size", int),
    Mapping("vbios_version", "vbios_version"),
    Mapping("board_part_number", "board_part_number"),
    Mapping("inforom_version/img_version", "inforom.image_version"),
    Mapping("inforom_version/oem_object", "inforom.oem_object"),
    Mapping("inforom_version/ecc_object", "inforom.ecc_object"),
    Mapping("inforom_version/pwr_object", "inforom.pwr_object"),
    Mapping("gpu_virtualization_mode/virtualization_mode", "virtualization.mode", _table(VIRTUALIZATION)),
    Mapping("gsp_firmware_version", "gsp_firmware.version"),
    Mapping("pci/pci_device_id", "pci.device_id", lambda text: int(text, 16)),
    Mapping("pci/pci_sub_system_id", "pci.subsystem_id", lambda text: int(text, 16)),
    Mapping("pci/pci_gpu_link_info/pcie_gen/max_link_gen", "pcie.max_link_gen", int),
    Mapping("pci/pci_gpu_link_info/pcie_gen/current_link_gen", "pcie.current_link_gen", int),
    Mapping("pci/pci_gpu_link_info/pcie_gen/max_device_link_gen", "pcie.gpu_max_link_gen", int),
    Mapping("pci/pci_gpu_link_info/pcie_gen/max_host_link_gen", "pcie.max_host_link_gen", int, not_available="N/A"),
    Mapping("pci/pci_gpu_link_info/link_widths/max_link_width", "pcie.max_link_width", _number("x")),
    Mapping("pci/pci_gpu_link_info/link_widths/current_link_width", "pcie.current_link_width", _number("x")),
    Mapping("fb_memory_usage/total", "memory.total_bytes", _mib),
    Mapping("fb_memory_usage/reserved", "memory.reserved_bytes", _mib),
    Mapping("bar1_memory_usage/total", "bar1_memory.total_bytes", _mib),
    Mapping("compute_mode", "compute_mode", _table(COMPUTE_MODES)),
    Mapping("ecc_mode/current_ecc", "ecc.mode_current", _mode),
    Mapping("ecc_mode/pending_ecc", "ecc.mode_pending", _mode),
    Mapping("remapped_rows/row_remapper_histogram/row_remapper_histogram_max",
            "remapped_rows.availability_histogram.max", _number("bank\\(s\\)")),
    Mapping("temperature/gpu_temp_max_threshold", "thermal.shutdown_threshold_c", _number("C")),
    Mapping("temperature/gpu_temp_slow_threshold", "thermal.slowdown_threshold_c", _number("C")),
    Mapping("temperature/gpu_temp_max_gpu_threshold", "thermal.max_operating_c", _number("C")),
    Mapping("temperature/gpu_target_temperature", "thermal.target_temperature_c", _number("C")),
    Mapping("gpu_power_readings/default_power_limit", "power.default_limit_mw", _watts),
    Mapping("gpu_power_readings/current_power_limit", "power.enforced_limit_mw", _watts),
    Mapping("gpu_power_readings/min_power_limit", "power.min_limit_mw", _watts),
    Mapping("gpu_power_readings/max_power_limit", "power.max_limit_mw", _watts),
    Mapping("applications_clocks/graphics_clock", "clocks.graphics_app", MHZ),
    Mapping("applications_clocks/mem_clock", "clocks.memory_app", MHZ),
    Mapping("default_applications_clocks/graphics_clock", "clocks.graphics_app_default", MHZ),
    Mapping("default_applications_clocks/mem_clock", "clocks.memory_app_default", MHZ),
    Mapping("max_clocks/graphics_clock", "clocks.graphics_max", MHZ),
    Mapping("max_clocks/sm_clock", "clocks.sm_max", MHZ),
    Mapping("max_clocks/mem_clock", "clocks.memory_max", MHZ),
    Mapping("max_clocks/video_clock", "clocks.video_max", MHZ),
)
#: facts the mappings above read, or that follow from them (not listed as "no profile key")
DERIVED = {
    "max_customer_boost_clocks/graphics_clock",  # the maximum graphics clock
    "gpu_power_readings/requested_power_limit",  # the enforced limit
    "pci/pci_gpu_link_info/pcie_gen/device_current_link_gen",  # the current generation
    "mig_devices", "processes",  # imported below
}
#: facts the simulation derives from others (the supported clocks: from the clock limits)
DERIVED_PREFIXES = ("supported_clocks/",)


def closest_builtin(capture: Capture) -> str:
    """The built-in profile whose GPU has the capture's PCI device id (else product name; else h100)."""
    first = capture.gpus[0]
    device_id = first.get("pci/pci_device_id", "").lower()
    name = first.get("product_name", "")
    boards = {board: load_builtin(board).device_defaults for board in BUILTIN_PROFILES}
    for board, defaults in boards.items():
        if defaults.pci is not None and defaults.pci.device_id is not None and \
                f"{defaults.pci.device_id:08x}" == device_id:
            return board
    for board, defaults in boards.items():
        if defaults.name == name:
            return board
    return "h100"


@dataclass(frozen=True)
class Imported:
    board: str  # the built-in profile it starts from
    profile: dict[str, Any]  # the document
    header: list[str]  # the lines of its header comment

    def yaml(self) -> str:
        body: str = yaml.safe_dump(self.profile, sort_keys=False, default_flow_style=None, width=110)
        return "".join(f"# {line}\n" for line in self.header) + body


def import_profile(capture: Capture, name: str | None = None) -> Imported:
    board = closest_builtin(capture)
    base = parse_yaml(builtin_text(board), f"{board}.yaml")
    stated_per_gpu = [gpu_values(capture, i) for i in range(capture.gpu_count)]
    per_gpu = [values for values, _ in stated_per_gpu]
    unsaid = sorted({fact for _, facts in stated_per_gpu for fact in facts})
    bus_ids = [_bus_id(gpu.get("pci/pci_bus_id", "")) for gpu in capture.gpus]
    roots = [root["id"] for root in (base.get("pcie_topology") or {}).get("root_complexes", [])]
    keep_bus_ids = all(bus_ids) and all(_covered(bus_id, roots) for bus_id in bus_ids)
    defaults = per_gpu[0]
    board_defaults = base.get("device_defaults", {})
    devices = []
    for index, values in enumerate(per_gpu):
        entry: dict[str, Any] = {"index": index}
        for key, value in values.items():  # a whole block where it differs: a block may have required keys
            if value != defaults.get(key):
                entry[key] = deep_merge(board_defaults.get(key), value) if isinstance(value, dict) else value
        if keep_bus_ids:
            entry["pci"] = {**entry.get("pci", {}), "bus_id": bus_ids[index]}
        processes = _processes(capture.gpus[index])
        if processes:
            entry["processes"] = processes
        devices.append(entry)
    stated = {"name": name or f"{board}-twin",
              "description": f"twin of {capture.source} ({capture.gpu_count} x {defaults.get('name', board)}, "
                             f"driver {capture.node['driver_version']}), from the built-in {board}",
              "system": system_values(capture), "device_defaults": defaults}
    profile = deep_merge(base, stated)
    profile["devices"] = devices  # the capture's GPUs, not the board's
    profile["system"]["num_devices"] = capture.gpu_count
    return Imported(board, profile, header(capture, board, keep_bus_ids, unsaid))


def system_values(capture: Capture) -> dict[str, Any]:
    driver = capture.node["driver_version"]
    values: dict[str, Any] = {"driver_version": driver}
    cuda = capture.node.get("cuda_version", "")
    match = re.fullmatch(r"(\d+)\.(\d+)", cuda)
    if match:
        values.update(cuda_version=cuda, cuda_version_major=int(match.group(1)),
                      cuda_version_minor=int(match.group(2)), nvml_version=f"{match.group(1)}.{driver}")
    return values


def gpu_values(capture: Capture, index: int) -> tuple[dict[str, Any], list[str]]:
    """The profile keys GPU ``index`` states (nested), from the mappings; the facts no key value can say."""
    elements = capture.gpus[index]
    out: dict[str, Any] = {}
    unsaid: list[str] = []
    for mapping in GPU_KEYS:
        text = elements.get(mapping.fact)
        if text is None or text in NOT_AVAILABLE:
            if text == "N/A" and mapping.not_available is not None:
                _put(out, mapping.key, mapping.not_available)
            continue
        try:
            value = mapping.convert(text)
        except Unrepresentable:
            unsaid.append(f"{mapping.fact}: {text}")
            continue
        except ValueError:
            raise CaptureError(capture.source, f"gpu {index}: <{mapping.fact}>: unexpected value {text!r}") from None
        _put(out, mapping.key, value)
    if elements.get("gsp_firmware_version") not in (None, *NOT_AVAILABLE):
        _put(out, "gsp_firmware.mode", "enabled")
    elif elements.get("gsp_firmware_version") == "N/A":
        _put(out, "gsp_firmware", {"mode": "disabled", "version": ""})
    return out, unsaid


def _processes(elements: dict[str, str]) -> list[dict[str, Any]]:
    """The capture's process list (one ``process_info`` or several, numbered) as profile processes."""
    out: list[dict[str, Any]] = []
    for path in elements:
        match = re.fullmatch(r"(processes/process_info(?:\[\d+\])?/)pid", path)
        if match is None:
            continue
        prefix = match.group(1)
        process: dict[str, Any] = {"pid": int(elements[path]), "type": elements.get(f"{prefix}type", "C"),
                                   "name": elements.get(f"{prefix}process_name", "")}
        memory = elements.get(f"{prefix}used_memory", "N/A")
        if memory not in NOT_AVAILABLE:
            process["used_memory_mib"] = _number("MiB")(memory)
        out.append(process)
    return out


def header(capture: Capture, board: str, kept_bus_ids: bool, unsaid: list[str]) -> list[str]:
    mapped = {m.fact for m in GPU_KEYS} | DERIVED
    unmapped = sorted({path for i in range(capture.gpu_count) for path, text in model_facts(capture.gpus[i]).items()
                       if path not in mapped and not path.startswith(DERIVED_PREFIXES) and text not in NOT_AVAILABLE})
    lines = [f"Imported from {capture.source} by `mokka profile import` ({capture.gpu_count} GPUs, "
             f"driver {capture.node['driver_version']}).",
             f"Starts from the built-in profile {board}; the capture cannot say these, so they are {board}'s:"]
    lines += [f"  {key}: {what}" for key, what in FROM_THE_BOARD.items()]
    if not kept_bus_ids:
        lines.append(f"  the GPUs' bus ids: the capture's are outside {board}'s root complexes")
    if any(path.startswith("mig_devices/") for gpu in capture.gpus for path in gpu):
        lines.append("  the capture's MIG partitions (mig_devices): a profile cannot state partitions; "
                     "make them with nvidia-smi mig -cgi ... -C on the node")
    if unmapped:
        lines.append("The capture states these, but the profile format has no key for them yet:")
        lines += [f"  {path}" for path in unmapped]
    if unsaid:
        lines.append(f"The profile format has no word for these values: {board}'s stay:")
        lines += [f"  {fact}" for fact in unsaid]
    return lines


def _put(out: dict[str, Any], key: str, value: Any) -> None:
    *parents, last = key.split(".")
    for part in parents:
        out = out.setdefault(part, {})
    out[last] = value


def _covered(bus_id: str, roots: list[str]) -> bool:
    """Whether one of the root complexes (``pciDDDD:BB``) is on the bus id's domain, at or below its bus."""
    domain, bus = bus_id.split(":")[:2]
    return not roots or any(root == f"pci{domain}:{root[-2:]}" and int(root[-2:], 16) <= int(bus, 16)
                            for root in roots)


def _bus_id(text: str) -> str:
    """nvidia-smi's 00000000:06:00.0 as a profile's 0000:06:00.0."""
    match = re.fullmatch(r"([0-9A-Fa-f]{4,8}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.([0-7])", text)
    if match is None:
        return ""
    return f"{int(match.group(1), 16):04x}:{match.group(2)}:{match.group(3)}.{match.group(4)}".lower()
