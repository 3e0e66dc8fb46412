"""The facts of an ``nvidia-smi -q -x`` document (drivers 535-595): per GPU, element path -> text.

A *model fact* describes the board and its driver (names, part numbers, VBIOS, limits, clocks,
thresholds, sizes); what describes one unit (serials, UUIDs, bus position) or one moment (readings,
counters, processes) is left out, each for the reason :data:`UNIT_OR_MOMENT` gives.  Paths are
normalised to the newest drivers' element names, so a 535 document compares with a 580 one.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from ...errors import MokkaError

ROOT_TAG = "nvidia_smi_log"
MAX_BYTES = 32 << 20  # a GB200 NVL72 tray is 4 GPUs (~0.3 MiB); far past any real node
GPU_COUNT = "attached_gpus"
#: the node-level elements that are model facts (the rest: timestamp)
NODE_FACTS = ("driver_version", "cuda_version", GPU_COUNT)

#: Elements (path, or a path and everything below it) that are not model facts, and why.
#: These are the elements a twin deliberately differs in.
UNIT_OR_MOMENT: dict[str, str] = {
    "timestamp": "when the capture was taken",
    "serial": "this unit's serial number",
    "uuid": "this unit's UUID",
    "pdi": "this unit's per-device identifier",
    "minor_number": "the /dev/nvidia<N> the driver gave this unit",
    "board_id": "derived from the bus position of this unit",
    "platformInfo": "this unit's rack position, chassis serial and fabric GUID",
    "pci/pci_bus": "this unit's bus position",
    "pci/pci_device": "this unit's bus position",
    "pci/pci_domain": "this unit's bus position",
    "pci/pci_bus_id": "this unit's bus position",
    "pci/replay_counter": "a counter since boot",
    "pci/replay_rollover_counter": "a counter since boot",
    "pci/tx_util": "a live reading",
    "pci/rx_util": "a live reading",
    "fan_speed": "a live reading",
    "performance_state": "the P-state at that moment",
    "clocks_event_reasons": "the clock limits active at that moment",
    "clocks_event_reasons_counters": "time accumulated since boot",
    "fb_memory_usage/used": "a live reading",
    "fb_memory_usage/free": "a live reading",
    "bar1_memory_usage/used": "a live reading",
    "bar1_memory_usage/free": "a live reading",
    "cc_protected_memory_usage/used": "a live reading",
    "cc_protected_memory_usage/free": "a live reading",
    "utilization": "live readings",
    "encoder_stats": "live sessions",
    "fbc_stats": "live sessions",
    "ecc_errors": "error counts of this unit",
    "retired_pages": "pages this unit has retired",
    "remapped_rows/remapped_row_corr": "rows this unit has remapped",
    "remapped_rows/remapped_row_unc": "rows this unit has remapped",
    "remapped_rows/remapped_row_corr_inactive": "rows this unit has remapped",
    "remapped_rows/remapped_row_unc_inactive": "rows this unit has remapped",
    "remapped_rows/remapped_row_pending": "this unit's remapping state",
    "remapped_rows/remapped_row_failure": "this unit's remapping state",
    "remapped_rows/row_remapper_histogram/row_remapper_histogram_high": "banks of this unit left after remaps",
    "remapped_rows/row_remapper_histogram/row_remapper_histogram_partial": "banks of this unit left after remaps",
    "remapped_rows/row_remapper_histogram/row_remapper_histogram_low": "banks of this unit left after remaps",
    "remapped_rows/row_remapper_histogram/row_remapper_histogram_none": "banks of this unit left after remaps",
    "temperature/gpu_temp": "a live reading",
    "temperature/memory_temp": "a live reading",
    "temperature/gpu_temp_tlimit": "a live reading (degrees below the slowdown limit)",
    "gpu_power_readings/power_state": "the P-state at that moment",
    "gpu_power_readings/average_power_draw": "a live reading",
    "gpu_power_readings/instant_power_draw": "a live reading",
    "gpu_memory_power_readings": "live readings",
    "module_power_readings/power_state": "the P-state at that moment",
    "module_power_readings/average_power_draw": "a live reading",
    "module_power_readings/instant_power_draw": "a live reading",
    "clocks": "live readings",
    "voltage": "a live reading",
    "fabric/state": "how far the fabric manager had got at that moment",
    "fabric/status": "how far the fabric manager had got at that moment",
    "fabric/cliqueId": "the clique the fabric manager gave this node",
    "fabric/clusterUuid": "the cluster this node was placed in",
    "fabric/health": "this unit's fabric health at that moment",
    "inforom_bbx_flush": "when this unit last flushed its black box",
    "gpu_reset_status": "whether this unit needed a reset at that moment",
    "gpu_recovery_action": "whether this unit needed a recovery at that moment",
    "mig_devices": "the MIG partitions made on this node (imported, not compared)",
    "processes": "the processes running at that moment (imported, not compared)",
    "accounted_processes": "the processes accounted so far",
}

#: What newer drivers (580 and 595 in the captures) print for a value they no longer report (display mode,
#: application clocks): the element then says nothing about the board, so it is not a fact (not comparable).
WITHDRAWN = "Requested functionality has been deprecated"

#: Older drivers' element paths under their newest names (a path, or a path's first part).
RENAMED_PATHS = {
    "gpu_module_id": "platformInfo/module_id",  # 535-555; 570+ moved it into platformInfo
    "power_readings": "gpu_power_readings",  # before 535
    "gpu_power_readings/power_draw": "gpu_power_readings/instant_power_draw",  # 535, 555
    "module_power_readings/power_draw": "module_power_readings/instant_power_draw",
    "gpu_memory_power_readings/power_draw": "gpu_memory_power_readings/instant_power_draw",
}
#: Older element names (a prefix of one path part) under their newest names.
RENAMED_TAG_PREFIXES = (("clocks_throttle_reason", "clocks_event_reason"),)


class CaptureError(MokkaError):
    """A file that is not a readable ``nvidia-smi -q -x`` document."""

    def __init__(self, source: str, reason: str) -> None:
        super().__init__(f"{source}: {reason}")


@dataclass(frozen=True)
class Capture:
    """One ``nvidia-smi -q -x`` document: node elements and, per GPU, every element (normalised paths)."""

    source: str
    node: dict[str, str]
    gpus: tuple[dict[str, str], ...]

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)

    def node_facts(self) -> dict[str, str]:
        facts = {name: self.node[name] for name in NODE_FACTS if name in self.node}
        facts[GPU_COUNT] = str(self.gpu_count)  # the <gpu> elements, whatever attached_gpus says
        return facts

    def gpu_facts(self, index: int) -> dict[str, str]:
        return model_facts(self.gpus[index])


def read_capture(path: Path) -> Capture:
    """The capture in ``path``; CaptureError naming the file and what is wrong."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise CaptureError(str(path), f"cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_BYTES:
        raise CaptureError(str(path), f"larger than {MAX_BYTES >> 20} MiB: not an nvidia-smi -q -x capture")
    return parse_capture(data, str(path))


def parse_capture(data: bytes | str, source: str) -> Capture:
    try:
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        line, column = exc.position
        raise CaptureError(source, f"not well-formed XML (truncated?): {_reason(exc)} at line {line}, "
                                   f"column {column}") from None
    if root.tag != ROOT_TAG:
        raise CaptureError(source, f"not an nvidia-smi -q -x document: the root element is <{root.tag}>, "
                                   f"not <{ROOT_TAG}>")
    node = {child.tag: _text(child) for child in root if child.tag != "gpu" and len(child) == 0}
    if "driver_version" not in node:
        raise CaptureError(source, "no <driver_version>: not an nvidia-smi -q -x document")
    gpus = tuple(elements(child) for child in root if child.tag == "gpu")
    if not gpus:
        raise CaptureError(source, "no <gpu> element: a capture of a node without GPUs cannot be compared")
    return Capture(source, node, gpus)


def _reason(exc: ET.ParseError) -> str:
    return str(exc).split(":", 1)[0]


def _text(element: ET.Element) -> str:
    return " ".join((element.text or "").split())


def elements(gpu: ET.Element) -> dict[str, str]:
    """Every leaf element below ``gpu``: normalised path -> text.

    Repeated leaves (a clock list) are one fact, their texts joined; repeated parents are
    numbered (``supported_clocks/supported_mem_clock[1]/value``).
    """
    out: dict[str, str] = {}

    def walk(element: ET.Element, path: str) -> None:
        children = list(element)
        if not children:
            if path:
                out[path] = _text(element)
            return
        tags = [child.tag for child in children]
        numbered: dict[str, int] = {}
        for child in children:
            name = normal_tag(child.tag)
            child_path = f"{path}/{name}" if path else name
            if tags.count(child.tag) > 1:
                if len(child) == 0:
                    out[child_path] = ", ".join(_text(c) for c in children if c.tag == child.tag)
                    continue
                numbered[child.tag] = numbered.get(child.tag, -1) + 1
                child_path += f"[{numbered[child.tag]}]"
            walk(child, child_path)

    walk(gpu, "")
    return {normal_path(path): text for path, text in out.items()}


def normal_tag(tag: str) -> str:
    for old, new in RENAMED_TAG_PREFIXES:
        if tag.startswith(old):
            return new + tag[len(old):]
    return tag


def normal_path(path: str) -> str:
    for old, new in RENAMED_PATHS.items():  # in order: a renamed parent may hold a renamed child
        if path == old or path.startswith(old + "/"):
            path = new + path[len(old):]
    return path


def why_not_a_fact(path: str) -> str | None:
    """Why the element at ``path`` does not describe the model (None: it does)."""
    parts = [part.split("[", 1)[0] for part in path.split("/")]
    for end in range(len(parts), 0, -1):
        reason = UNIT_OR_MOMENT.get("/".join(parts[:end]))
        if reason is not None:
            return reason
    return None


def model_facts(gpu_elements: dict[str, str]) -> dict[str, str]:
    return {path: text for path, text in gpu_elements.items() if text != WITHDRAWN and why_not_a_fact(path) is None}
