"""The NVLink surface's keys in the NVML state file: links, the NV# matrix, NVLink error clocks.

Pure: a function of the node and the time it came up (the origin of error clocks a profile gives
without one, see ``mokka_core.model.faults``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

from mokka_core.model.faults import nvlink_error_clock
from mokka_core.stage.nvml_view import nvml_bus_id
from mokka_core.stage.surface import NvmlKeys

from .topology import nv_matrix

if TYPE_CHECKING:
    from mokka_core.model.node import Gpu, Node, Switch

LINK_REMOTE = {"gpu": 0, "ibmnpu": 1, "switch": 2}
# what the library reports as a link's remote PCI bus id where the remote has none (an NVSwitch
# that is not PCI-visible, a CPU)
SWITCH_SENTINEL_BUS_ID = "FFFFFFFF:FF:FF.0"
NVIDIA_VENDOR = 0x10DE


def nvml_keys(node: Node, booted_ms: int) -> NvmlKeys:
    matrix = nv_matrix(node)
    switches = {s.bus_id: s for s in node.switches}
    by_index = {g.index: g for g in node.gpus}
    devices: dict[int, tuple[tuple[str, object], ...]] = {}
    for gpu, row in zip(node.gpus, matrix, strict=True):
        pairs: list[tuple[str, object]] = [("topology.nvlinks", ",".join(str(n) for n in row))]
        if gpu.links:
            pairs += _links(node, gpu, switches, by_index)
            pairs += _errors(gpu, booted_ms)
        devices[gpu.index] = tuple(pairs)
    return NvmlKeys(devices=MappingProxyType(devices))


def _links(node: Node, gpu: Gpu, switches: Mapping[str, Switch],
           by_index: Mapping[int, Gpu]) -> Iterator[tuple[str, object]]:
    assert node.nvlink is not None
    yield "nvlink.count", max(link.link for link in gpu.links) + 1
    yield "nvlink.version", node.nvlink.version
    yield "nvlink.speed_mbps", node.nvlink.bandwidth_per_link_mbps
    yield "nvlink.nvswitch_links", sum(1 for link in gpu.links if link.active and link.remote_type == "switch")
    for link in gpu.links:
        p = f"nvlink.{link.link}."
        yield p + "state", 1 if link.active else 0
        yield p + "remote_type", LINK_REMOTE.get(link.remote_type, 255)
        remote_bus, remote_dev = SWITCH_SENTINEL_BUS_ID, 0
        if link.remote_type == "switch":
            switch = switches.get(link.remote_bus_id or "")
            if switch is not None:
                remote_dev = switch.device_id << 16 | NVIDIA_VENDOR
                if switch.pci_visible:
                    remote_bus = nvml_bus_id(switch.bus_id)
        elif link.remote_type == "gpu" and link.remote_index is not None and link.remote_index in by_index:
            peer = by_index[link.remote_index]
            remote_bus = nvml_bus_id(peer.bus_id)
            remote_dev = peer.config.pci.device_id
        elif link.remote_bus_id:
            remote_bus = nvml_bus_id(link.remote_bus_id)
        yield p + "remote_bus_id", remote_bus
        yield p + "remote_device_id", f"0x{remote_dev:08x}"


def _errors(gpu: Gpu, booted_ms: int) -> Iterator[tuple[str, object]]:
    clock = nvlink_error_clock(gpu, booted_ms)
    if not clock.counts():
        return
    yield "nvlink_error.rate_milli", clock.rate_milli
    yield "nvlink_error.epoch_ms", clock.epoch_ms
    for link in sorted(set(clock.inject) | set(clock.accrued)):
        if link in clock.inject:
            yield f"nvlink.{link}.errors.inject", 1
        if clock.accrued.get(link):
            yield f"nvlink.{link}.errors.injected", clock.accrued[link]
