"""The NVML view of a node: the state file the mock libnvidia-ml reads.

``render_nvml_state(node)`` is a pure function of the resolved :class:`Node`; the format
(framing, keys, types) is documented in ``native/README.md`` and golden-tested in
``tests/test_nvml_view.py``.  ``write_nvml_state`` replaces the file atomically so every
running NVML client switches to the new snapshot within one check interval.

Surfaces other than gpu contribute their own keys (:class:`~mokka_core.stage.surface.NvmlKeys`):
sim-nvlink the links, the NV# matrix and the NVLink error clocks, sim-fabricmanager the fabric
state.  A contributed key replaces the default written here; without the fabric manager's
contribution a fabric state ``auto`` is Not Started, as on a fabric node with no fabric manager.

Profile-level ``dynamic_metrics_defaults`` is deliberately *not* applied as a default
``dynamic_metrics`` of every GPU: upstream, the engine ignores it; it is only the per-profile layer
of the Helm chart's opt-in ``gpu.dynamicMetrics`` overlay.  Applying it by default would make
every node's temperature, power and utilization time-varying where the profile gives fixed values
(and where ``nvml-mock-ctl temp``/``power`` set fixed ones).  A GPU gets dynamic metrics only from
its own (merged) ``dynamic_metrics`` block.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import zlib
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import StateValueError
from ..model.identity import legacy_irq
from ..model.physics import readings
from ..schema import clocks
from ..schema.limits import MAX_XID_EVENTS
from .nvml_key_lookup import value_problem
from .nvml_keys import HEADER, MAXIMA, RANGES, SIZES, TYPES
from .store import atomic_write

if TYPE_CHECKING:
    from ..model.config import FabricHealth, GpuConfig, Thermal
    from ..model.node import Gpu, Node
    from .surface import NvmlKeys

__all__ = ["FABRIC_STATE", "HEADER", "STATE_FILE_NAME", "gpu_numa_node", "nvml_bus_id", "render_nvml_state",
           "topology_level", "write_nvml_state"]

STATE_FILE_NAME = "mokka-nvml.state"

# nvml.h enumerations
ADDRESSING_MODE = {"none": 0, "hmm": 1, "ats": 2}  # nvmlDeviceAddressingModeType_t
PCIE_ATOMIC = {"fetchadd_32": 1, "fetchadd_64": 2, "swap_32": 4, "swap_64": 8, "cas_32": 16, "cas_64": 32}
BRAND = {"quadro": 1, "tesla": 2, "geforce": 5, "titan": 6, "nvidia_rtx": 13, "nvidia": 14}
ARCH = {"kepler": 2, "maxwell": 3, "pascal": 4, "volta": 5, "turing": 6, "ampere": 7, "ada": 8, "ada_lovelace": 8,
        "hopper": 9, "blackwell": 10}
COMPUTE_MODE = {"default": 0, "exclusive_thread": 1, "prohibited": 2, "exclusive_process": 3}
GOM = {"all_on": 0, "compute": 1, "low_dp": 2}  # nvmlGpuOperationMode_t
VIRT_MODE = {"none": 0, "passthrough": 1, "vgpu": 2, "host_vgpu": 3, "host_vsga": 4}
HOST_VGPU_MODE = {"non_sriov": 0, "sriov": 1}
FABRIC_STATE = {"not_supported": 0, "not_started": 1, "in_progress": 2, "completed": 3, "": 3}
UTIL_PATTERN = {"steady": 0, "": 0, "idle": 1, "busy": 2, "burst": 3}
# nvmlClocksEventReason bits
EVENT_REASONS = {"gpu_idle": 0x1, "applications_clocks_setting": 0x2, "sw_power_cap": 0x4, "hw_slowdown": 0x8,
                 "sync_boost": 0x10, "sw_thermal_slowdown": 0x20, "hw_thermal_slowdown": 0x40,
                 "hw_power_brake_slowdown": 0x80, "display_clocks_setting": 0x100}
# nvmlGpuTopologyLevel_t
TOPO_SINGLE, TOPO_NODE, TOPO_SYSTEM = 10, 40, 50
# nvmlPlatformInfo_t peerType
PEER_TYPE = {"": 0, "direct_connected": 1, "switch_connected": 2}
# fabric health mask: 2-bit fields (1 true, 2 false) at 0/2/4/6, 4-bit incorrect configuration at 8
FABRIC_CONFIG = {"not_supported": 0, "none": 1, "incorrect_sysguid": 2, "incorrect_chassis_sn": 3, "no_partition": 4,
                 "insufficient_nvlinks": 5, "incompatible_gpu_fw": 6, "invalid_location": 7, "gpu_state_invalid": 8}
NVML_ERROR_DRIVER_NOT_LOADED = 9
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
XID_FALLEN_OFF_BUS = 79
XID_DBE = 48
#: failure.mode of a delayed failure, and the Xid it raises unless the profile names one
DELAYED_FAILURE = {"lost": (1, 0), "fallen_off_bus": (2, XID_FALLEN_OFF_BUS), "ecc_uncorrectable": (3, XID_DBE)}
# counters whose library default is 0: a zero is not written (smaller file, faster parse in every process)
ZERO_DEFAULT_PREFIXES = ("ecc.volatile.", "ecc.aggregate.", "violation.", "encoder.", "fbc.", "pcie.replay_counter",
                         "pcie.tx_kbps", "pcie.rx_kbps", "utilization.encoder", "utilization.decoder",
                         "utilization.jpeg", "utilization.ofa", "pcie.atomics_")
# coherent Grace systems expose each GPU's memory as NUMA nodes after the CPUs' nodes, a block of
# 8 per GPU (one per possible MIG partition): GB200 with 2 Grace CPUs shows GPU NUMA IDs 2, 10, 18, 26
GPU_NUMA_NODES_PER_GPU = 8


@functools.lru_cache(maxsize=4096)
def nvml_bus_id(bus_id: str) -> str:
    """``0000:1a:00.0`` -> ``00000000:1A:00.0`` (NVML's 8-digit, upper-case form)."""
    domain, bus, rest = bus_id.split(":")
    dev, fn = rest.split(".")
    return f"{int(domain, 16):08X}:{int(bus, 16):02X}:{int(dev, 16):02X}.{int(fn, 16):X}"


def _b(flag: bool | str | None) -> int:
    return 1 if flag is True or flag == "enabled" else 0


def topology_level(a: Gpu, b: Gpu) -> int:
    """PCIe common ancestor (nvmlGpuTopologyLevel_t): same root complex PIX, same NUMA node NODE, else SYS."""
    if a.index == b.index:
        return 0
    if a.root_complex == b.root_complex:
        return TOPO_SINGLE
    if a.numa_node is not None and a.numa_node == b.numa_node:
        return TOPO_NODE
    return TOPO_SYSTEM


def gpu_numa_node(node: Node, gpu: Gpu) -> int | None:
    """nvmlDeviceGetNumaNodeId: the GPU's own NUMA node, only where its memory is one (coherent
    Grace C2C: ``grace_superchip.coherent_memory``); x86 boards answer N/A. Deterministic scheme:
    the CPUs' nodes come first (0..max root complex NUMA node), then a block of
    :data:`GPU_NUMA_NODES_PER_GPU` per GPU in index order, the GPU being the first of its block."""
    grace = gpu.config.grace_superchip
    if grace is None or not grace.enabled or not grace.coherent_memory:
        return None
    cpu_nodes = max((root.numa_node for root in node.root_complexes), default=0) + 1
    return cpu_nodes + GPU_NUMA_NODES_PER_GPU * gpu.index


def _health_mask(health: FabricHealth) -> int:
    def tri(flag: bool) -> int:
        return 1 if flag else 2

    return (tri(health.degraded_bandwidth) | tri(health.route_recovery) << 2 | tri(health.route_unhealthy) << 4
            | tri(health.access_timeout_recovery) << 6 | FABRIC_CONFIG.get(health.incorrect_configuration, 1) << 8)


def _platform(gpu: Gpu, arch: int) -> Iterator[tuple[str, object]]:
    """The 13.x API's platform getters. Addressing mode, where the profile does not state it: ATS where the
    GPU's memory is coherent with Grace (C2C), else HMM (a host with HMM disabled shows None). IRQ: the
    line sysfs shows. PDI: a 64-bit per-GPU id, from the UUID so every process agrees. Platform info (rack
    position) on Blackwell and newer, from the profile's ``platform``."""
    grace = gpu.config.grace_superchip
    coherent = grace is not None and grace.enabled and grace.coherent_memory
    if not gpu.config.addressing_mode:
        yield "addressing_mode", ADDRESSING_MODE["ats" if coherent else "hmm"]
    yield "irq", legacy_irq(gpu.bus_id)
    yield "pdi", f"0x{int.from_bytes(hashlib.blake2b(gpu.uuid.encode(), digest_size=8).digest()) or 1:016x}"
    if arch >= ARCH["blackwell"]:
        p = gpu.config.platform
        yield "platform.supported", 1
        if p is not None:
            yield "platform.chassis_serial", p.chassis_serial_number
            yield "platform.slot_number", p.slot_number
            yield "platform.tray_index", p.tray_index
            yield "platform.host_id", p.host_id
            yield "platform.peer_type", PEER_TYPE[p.peer_type]


def _device(node: Node, gpu: Gpu, root_index: Mapping[str, int]) -> Iterator[tuple[str, object]]:
    c = gpu.config
    now = readings(c)
    arch = ARCH.get(c.architecture or "", 0)
    yield "name", c.name or "NVIDIA GPU"
    yield "uuid", gpu.uuid
    yield "serial", gpu.serial
    yield "board_part_number", c.board_part_number or ""
    yield "gpu_part_number", c.gpu_part_number or ""
    if c.addressing_mode:
        yield "addressing_mode", ADDRESSING_MODE[c.addressing_mode]
    if c.sparse_operation_mode:
        yield "sparse_mode", _b(c.sparse_operation_mode)
    yield "vbios_version", c.vbios_version or ""
    if c.inforom:
        yield "inforom.image", c.inforom.image_version
        yield "inforom.oem", c.inforom.oem_object
        yield "inforom.ecc", c.inforom.ecc_object
        yield "inforom.power", c.inforom.pwr_object
        if c.inforom.bbx_flush_duration_us:
            yield "inforom.bbx_flush_us", c.inforom.bbx_flush_duration_us
    yield "brand", BRAND.get(c.brand or "", 0)
    yield "architecture", arch
    if c.compute_capability:
        yield "cuda_cc_major", c.compute_capability.major
        yield "cuda_cc_minor", c.compute_capability.minor
    if c.num_gpu_cores:
        yield "num_gpu_cores", c.num_gpu_cores
    yield "minor_number", gpu.minor_number
    domain, bus, rest = gpu.bus_id.split(":")
    dev, fn = (int(x, 16) for x in rest.split("."))
    yield "board_id", int(domain, 16) << 16 | int(bus, 16) << 8 | (dev & 0x1F) << 3 | (fn & 7)
    # module ids exist on SXM/HGX baseboards (NVLink) and where the profile has a platform block
    yield "module_id", gpu.module_id if (gpu.links or c.platform) else 0
    yield "lost", _b(node.gpu_lost(gpu))

    yield "pci.bus_id", nvml_bus_id(gpu.bus_id)
    yield "pci.device_id", f"0x{c.pci.device_id:08x}"
    yield "pci.subsystem_id", f"0x{c.pci.subsystem_id:08x}"
    p = c.pcie
    yield "pcie.max_gen", p.max_link_gen
    yield "pcie.gpu_max_gen", p.gpu_max_link_gen or p.max_link_gen
    host_gen = p.max_link_gen if p.max_host_link_gen is None else p.max_host_link_gen
    yield "pcie.host_max_gen", 0 if host_gen == "N/A" else host_gen
    yield "pcie.current_gen", p.current_link_gen
    yield "pcie.atomics_outbound", sum(PCIE_ATOMIC[name] for name in set(p.atomic_caps_outbound))
    yield "pcie.atomics_inbound", sum(PCIE_ATOMIC[name] for name in set(p.atomic_caps_inbound))
    yield "pcie.max_width", p.max_link_width
    yield "pcie.current_width", p.current_link_width
    yield "pcie.replay_counter", p.replay_counter
    yield "pcie.tx_kbps", p.tx_throughput_kbps
    yield "pcie.rx_kbps", p.rx_throughput_kbps

    if c.memory:
        m = c.memory
        yield "memory.total", m.total_bytes
        yield "memory.reserved", m.reserved_bytes
        yield "memory.used", now.memory_used_bytes
        yield "memory.bus_width", m.memory_bus_width
    if c.bar1_memory:
        yield "bar1.total", c.bar1_memory.total_bytes
        yield "bar1.used", c.bar1_memory.used_bytes

    if c.thermal:
        t = c.thermal
        yield "temperature.gpu", now.temperature_c
        yield "temperature.memory", t.temperature_memory_c
        yield "temperature.shutdown", t.shutdown_threshold_c
        yield "temperature.slowdown", t.slowdown_threshold_c
        yield "temperature.gpu_max", t.max_operating_c
        # HBM boards report a memory max operating temperature (nvidia-smi: "Memory Max Operating Temp")
        hbm = c.memory is not None and c.memory.memory_bus_width >= 4096
        mem_max = 95 if hbm and t.shutdown_threshold_c else 0
        yield "temperature.mem_max", mem_max
        yield "temperature.tlimit", 1 if arch >= ARCH["ada"] else 0
        if arch >= ARCH["ada"]:
            yield from _tlimit_thresholds(t, mem_max)

    if c.power:
        pw = c.power
        yield "power.supported", _b(pw.management_supported)
        yield "power.usage_mw", now.power_mw
        yield "power.limit_mw", pw.enforced_limit_mw
        yield "power.enforced_limit_mw", pw.enforced_limit_mw
        yield "power.default_limit_mw", pw.default_limit_mw
        yield "power.min_limit_mw", pw.min_limit_mw
        yield "power.max_limit_mw", pw.max_limit_mw
        yield "power.management_mode", _b(pw.management_mode)
        yield "power.energy_mj", pw.total_energy_consumption_mj
        if pw.module:
            yield "power.module_limit_mw", pw.module.enforced_limit_mw
            yield "power.module_default_limit_mw", pw.module.default_limit_mw
            yield "power.module_min_limit_mw", pw.module.min_limit_mw
            yield "power.module_max_limit_mw", pw.module.max_limit_mw
    if c.fan:
        yield "fan.count", c.fan.count
        yield "fan.speed", c.fan.speed_percent if isinstance(c.fan.speed_percent, int) else 0
        if c.fan.target_speed_percent is not None:
            yield "fan.target_speed", c.fan.target_speed_percent

    if c.clocks and now.clocks:
        k, current = c.clocks, now.clocks
        table = {
            "graphics": (current.graphics, k.graphics_max, k.graphics_app, k.graphics_app_default, k.graphics_max),
            "sm": (current.sm, k.sm_max, k.graphics_app, k.graphics_app_default, k.sm_max),
            "memory": (current.memory, k.memory_max, k.memory_app, k.memory_app_default, k.memory_max),
            "video": (current.video, k.video_max, 0, 0, k.video_max),
        }
        for domain_name, values in table.items():
            for what, value in zip(("current", "max", "app", "default_app", "boost_max"), values, strict=True):
                yield f"clock.{domain_name}.{what}", value
    yield from _supported_clocks(c)
    if c.clocks_throttle_reasons:
        r = c.clocks_throttle_reasons
        yield "clock.event_reasons", f"0x{sum(bit for name, bit in EVENT_REASONS.items() if name in now.reasons):x}"
        yield "violation.power_ns", r.counters.sw_power_cap_us * 1000
        yield "violation.thermal_ns", (r.counters.sw_thermal_slowdown_us + r.counters.hw_thermal_slowdown_us) * 1000
        yield "violation.sync_boost_ns", r.counters.sync_boost_us * 1000
    yield from _dynamic(gpu)
    yield "clock.supported_event_reasons", f"0x{sum(EVENT_REASONS.values()):x}"
    yield "pstate", int(now.pstate[1:])
    if c.utilization:
        u = c.utilization
        yield "utilization.gpu", u.gpu
        yield "utilization.memory", u.memory
        yield "utilization.encoder", u.encoder
        yield "utilization.decoder", u.decoder
        yield "utilization.jpeg", u.jpeg
        yield "utilization.ofa", u.ofa
    for prefix, stats in (("encoder", c.encoder_stats), ("fbc", c.fbc_stats)):
        if stats:
            yield f"{prefix}.sessions", stats.session_count
            yield f"{prefix}.fps", stats.average_fps
            yield f"{prefix}.latency_us", stats.average_latency_us

    yield from _ecc(gpu, arch)

    yield "persistence_mode", _b(c.persistence_mode)
    yield "compute_mode", COMPUTE_MODE.get(c.compute_mode or "default", 0)
    if c.display:
        yield "display_mode", _b(c.display.mode)
        yield "display_active", _b(c.display.active)
    if c.accounting:
        yield "accounting_mode", _b(c.accounting.mode)
        yield "accounting_buffer_size", c.accounting.buffer_size
    virt = c.virtualization
    yield "virtualization_mode", VIRT_MODE.get(virt.mode if virt else "none", 0)
    yield "host_vgpu_mode", HOST_VGPU_MODE.get(virt.host_vgpu_mode if virt else "", -1)
    yield "driver_model", -1  # Windows only
    gsp = c.gsp_firmware
    yield "gsp.mode", _b(gsp.mode) if gsp else 0
    yield "gsp.default_mode", _b(gsp.mode) if gsp else 0
    yield "gsp.version", gsp.version if gsp else ""
    if c.mig and c.mig.max_gpu_instances:
        yield "mig.current", _b(c.mig.mode_current)
        yield "mig.pending", _b(c.mig.mode_pending)
        yield "mig.max_devices", c.mig.max_gpu_instances
    else:
        yield "mig.current", -1  # board without MIG: N/A

    if c.fabric:
        f = c.fabric
        yield "fabric.supported", 1
        yield "fabric.cluster_uuid", f.cluster_uuid
        yield "fabric.clique_id", f.clique_id
        yield "fabric.state", FABRIC_STATE["not_started" if f.state == "auto" else f.state]
        yield "fabric.status", 0
        yield "fabric.health_mask", f.health_mask if f.health_mask is not None else _health_mask(f.health)
    # Hopper and newer report their C2C mode (Disabled without a Grace CPU)
    if arch >= ARCH["hopper"]:
        yield "c2c.supported", 1
        yield "c2c.enabled", _b(bool(node.nvlink and node.nvlink.c2c_enabled))
    yield from _platform(gpu, arch)
    yield from _delayed_failure(gpu)
    yield from _gpm(gpu, arch)
    if c.features.confidential_compute:
        yield "conf_compute.supported", 1
    gom = c.gpu_operation_mode
    if gom.current:
        yield "gpu_operation_mode.current", GOM[gom.current]
        yield "gpu_operation_mode.pending", GOM[gom.pending or gom.current]

    if gpu.numa_node is not None:
        yield "numa_node", gpu.numa_node
    own_node = gpu_numa_node(node, gpu)
    if own_node is not None:
        yield "gpu_numa_node", own_node
    yield "root_complex", root_index.get(gpu.root_complex, -1)
    yield "pcie_switch", gpu.index  # each GPU sits behind its own PCIe switch, shared with its HCAs
    if gpu.cpu_affinity:
        yield "cpu_affinity", gpu.cpu_affinity
    yield "topology.levels", ",".join(str(topology_level(gpu, other)) for other in node.gpus)
    yield from _processes(gpu)


def _delayed_failure(gpu: Gpu) -> Iterator[tuple[str, object]]:
    mode = gpu.delayed_failure
    if mode is None:
        return
    f = gpu.config.failure
    number, xid = DELAYED_FAILURE[mode]
    yield "failure.mode", number
    yield "failure.after_calls", f.after_calls or 0
    yield "failure.probability_ppb", round(1e9 if f.probability is None else f.probability * 1e9)
    yield "failure.seed", f.seed & (1 << 64) - 1
    yield "failure.xid", f.xid.code if f.xid and f.xid.code else xid


def _gpm(gpu: Gpu, arch: int) -> Iterator[tuple[str, object]]:
    g = gpu.config.gpm
    supported = g.supported if g and g.supported is not None else arch >= ARCH["hopper"]
    if supported:
        yield "gpm.supported", 1
        yield "gpm.pcie_tx_mib_per_sec", g.pcie_tx_mib_per_sec if g else 2048
        yield "gpm.pcie_rx_mib_per_sec", g.pcie_rx_mib_per_sec if g else 2048


def _supported_clocks(c: GpuConfig) -> Iterator[tuple[str, object]]:
    """Each supported memory clock with its ladder of graphics clocks (schema/clocks.py)."""
    listed = [(m.freq_mhz, clocks.ladder(m.graphics_clocks)) for m in c.supported_clocks.memory_clocks]
    if not listed and c.clocks.graphics_max and c.clocks.memory_max:
        # none listed: the maximum memory clock, graphics from the maximum down to the default application clock
        top = c.clocks.graphics_max
        floor = min(c.clocks.graphics_app_default or top, top)
        listed = [(c.clocks.memory_max, clocks.Ladder(floor * 1000, 15000, (top - floor) // 15 + 1))]
    for row, (memory, ladder) in enumerate(listed):
        assert ladder is not None  # the schema accepts only ladders
        at = f"clock.supported.{row}."
        yield at + "memory", memory
        yield at + "graphics_lowest_khz", ladder.lowest_khz
        yield at + "graphics_step_khz", ladder.step_khz
        yield at + "graphics_rungs", ladder.rungs


def _tlimit_thresholds(t: Thermal, mem_max: int) -> Iterator[tuple[str, object]]:
    """The T.Limit thresholds: the profile's, else each absolute threshold relative to the slowdown one; and the
    temperature the margin counts down to: the profile's limit, else the slowdown threshold."""
    if t.tlimit is not None:
        values = (t.tlimit.shutdown_c, t.tlimit.slowdown_c, t.tlimit.gpu_max_c, t.tlimit.memory_max_c)
    else:
        ref = t.slowdown_threshold_c or t.shutdown_threshold_c
        values = (ref - t.shutdown_threshold_c, 0, ref - t.max_operating_c, ref - mem_max)
    for name, value in zip(("shutdown", "slowdown", "gpu_max", "mem_max"), values, strict=True):
        yield f"temperature.tlimit_{name}", value
    limit = t.tlimit.limit_c if t.tlimit is not None else None
    yield "temperature.tlimit_reference", t.slowdown_threshold_c or t.shutdown_threshold_c if limit is None else limit


def _dynamic(gpu: Gpu) -> Iterator[tuple[str, object]]:
    """Time-varying temperature / power / utilization: the library computes them per wall-clock second."""
    dm = gpu.config.dynamic_metrics
    if dm is None:
        return
    yield "dynamic.seed", dm.seed or zlib.crc32(gpu.uuid.encode())
    if dm.temperature:
        t = dm.temperature
        yield "dynamic.temperature", 1
        yield "dynamic.temperature.base_c", t.base_c
        yield "dynamic.temperature.variance_c", t.variance_c
        yield "dynamic.temperature.ramp_c", t.ramp_c
        yield "dynamic.temperature.ramp_period_s", t.ramp_period_sec
    if dm.power:
        yield "dynamic.power", 1
        yield "dynamic.power.base_mw", dm.power.base_mw
        yield "dynamic.power.variance_mw", dm.power.variance_mw
    if dm.utilization:
        u = dm.utilization
        yield "dynamic.utilization", 1
        yield "dynamic.utilization.pattern", UTIL_PATTERN[u.pattern]
        yield "dynamic.utilization.gpu_min", u.gpu_min
        yield "dynamic.utilization.gpu_max", u.gpu_max
        yield "dynamic.utilization.memory_min", u.memory_min
        yield "dynamic.utilization.memory_max", u.memory_max
        yield "dynamic.utilization.burst_period_s", u.burst_period_sec


def _ecc(gpu: Gpu, arch: int) -> Iterator[tuple[str, object]]:
    c = gpu.config
    if not c.ecc:
        yield "ecc.supported", 0
        return
    e = c.ecc
    yield "ecc.supported", 1
    yield "ecc.current", _b(e.mode_current)
    yield "ecc.pending", _b(e.mode_pending)
    yield "ecc.default", _b(e.default_mode)
    # the failure mode alone (as a profile may give it) means at least one uncorrectable error;
    # nvml-mock-ctl writes the counters themselves, which must not be counted twice
    at_least = 1 if gpu.failure_mode == "ecc_uncorrectable" else 0
    for scope in ("volatile", "aggregate"):
        counts = getattr(e.errors, scope)
        sram = getattr(e.sram, scope)
        for kind, bits in (("corrected", counts.single_bit), ("uncorrected", counts.double_bit)):
            locs = {"l1": bits.l1_cache, "l2": bits.l2_cache, "dram": bits.device_memory,
                    "register": bits.register_file, "texture": bits.texture_memory}
            # a profile may give only the total: what the locations do not explain is device memory
            locs["dram"] += max(0, bits.total - sum(locs.values()))
            if kind == "uncorrected":
                locs["dram"] = max(locs["dram"], at_least)
                locs["sram"] = sram.uncorrectable_parity + sram.uncorrectable_secded
            else:
                locs["sram"] = sram.correctable
            for loc, value in locs.items():
                yield f"ecc.{scope}.{kind}.{loc}", value
    yield "ecc.sram_threshold_exceeded", _b(e.sram.threshold_exceeded)
    if arch and arch < ARCH["ampere"]:  # page retirement; Ampere+ remaps rows instead
        rp = c.retired_pages
        yield "retired_pages.supported", 1
        if rp:
            yield "retired_pages.sbe", rp.single_bit_retirement.count
            yield "retired_pages.dbe", rp.double_bit_retirement.count
            yield "retired_pages.pending", _b(rp.pending_retirement or rp.pending_blacklist)
    else:
        rr = c.remapped_rows
        yield "remapped_rows.supported", 1
        if rr:
            yield "remapped_rows.correctable", rr.correctable
            yield "remapped_rows.uncorrectable", max(rr.uncorrectable, at_least)
            yield "remapped_rows.pending", _b(rr.pending)
            yield "remapped_rows.failure", _b(rr.failure_occurred or at_least > 0)
            if rr.availability_histogram:
                h = rr.availability_histogram
                for name in ("max", "high", "partial", "low", "none"):
                    yield f"remapped_rows.histogram.{name}", getattr(h, name)


def _mig_profiles(c: GpuConfig) -> Iterator[tuple[str, object]]:
    """The board's MIG profile table: a pure function of ``c.mig`` (rendered once per table, ``_mig_rows``)."""
    if not (c.mig and c.mig.max_gpu_instances):
        return
    for row, profile in enumerate(c.mig.gpu_instance_profiles):
        at = f"mig_profile.{row}."
        yield at + "profile", profile.nvml_profile
        yield at + "id", profile.id
        yield at + "name", profile.name
        yield at + "slices", profile.slices
        yield at + "instances", profile.instances
        yield at + "memory_mb", profile.memory_mb
        yield at + "sms", profile.multiprocessors
        yield at + "copy_engines", profile.copy_engines
        yield at + "decoders", profile.decoders
        yield at + "encoders", profile.encoders
        yield at + "jpegs", profile.jpegs
        yield at + "ofas", profile.ofas
        yield at + "placement_size", profile.placement_size
        yield at + "placements", ",".join(map(str, profile.placements))


def _pci_functions(node: Node, root_index: Mapping[str, int]) -> Iterator[tuple[str, object]]:
    """The node's non-GPU PCI functions (HCAs, PCI-visible NVSwitches): nvidia-smi topo -m asks the
    library for the PCIe level between them and the GPUs (export slot 23). An HCA assigned to a GPU
    shares that GPU's PCIe switch (``pcie_switch`` = the GPU's index), as on DGX/HGX baseboards."""
    functions: list[tuple[str, str | None, int | None, int | None]] = [
        (h.bus_id, h.root_complex, h.numa_node, h.gpu_index) for h in node.hcas]
    functions += [(s.bus_id, s.root_complex, s.numa_node, None) for s in node.switches if s.pci_visible]
    for n, (bus_id, root_complex, numa_node, near_gpu) in enumerate(functions[:256]):  # the library's limit
        yield f"pcifn.{n}.bus_id", nvml_bus_id(bus_id)
        yield f"pcifn.{n}.root_complex", root_index.get(root_complex or "", -1)
        yield f"pcifn.{n}.pcie_switch", -1 if near_gpu is None else near_gpu
        yield f"pcifn.{n}.numa_node", -1 if numa_node is None else numa_node


def _processes(gpu: Gpu) -> Iterator[tuple[str, object]]:
    n = 0
    for proc in gpu.config.processes or []:
        kinds = {"C": [0], "": [0], "G": [1], "C+G": [0, 1]}[proc.type]
        for kind in kinds:
            p = f"process.{n}."
            yield p + "pid", proc.pid
            yield p + "type", kind
            yield p + "used_bytes", proc.used_memory_mib << 20
            yield p + "name", proc.name
            yield p + "sm_util", proc.sm_util
            yield p + "mem_util", proc.mem_util
            yield p + "enc_util", proc.enc_util
            yield p + "dec_util", proc.dec_util
            n += 1
            if n >= 32:  # the library's per-GPU limit
                return


def render_nvml_state(node: Node, contributed: Iterable[NvmlKeys] = (), booted_ms: int = 0) -> str:
    """The state file text for `node` (format version 1, see native/README.md), a pure function of
    ``node``, the other surfaces' ``contributed`` keys (``Surface.nvml``) and ``booted_ms``, when the node
    came up (0: unknown, outside a node)."""
    system = node.system
    nvml_version = system.nvml_version or f"12.{system.driver_version}"
    cuda = system.cuda_version_major * 1000 + system.cuda_version_minor * 10
    init_error = 0 if node.driver_loaded else NVML_ERROR_DRIVER_NOT_LOADED
    extra_system, extra = _merged(tuple(contributed))
    lines = [HEADER, f"# node {node.node_name}, profile {node.profile_name}"]
    lines += [f"system.driver_version={system.driver_version}", f"system.nvml_version={nvml_version}",
              f"system.cuda_version={cuda}", f"system.device_count={len(node.gpus)}", f"system.init_error={init_error}"]
    if booted_ms:
        lines.append(f"system.booted_ms={booted_ms}")
    for what, name in (("node name", node.node_name), ("profile name", node.profile_name)):
        problem = value_problem("", name or "")
        if problem:
            raise StateValueError(f"{what} {name[:60]!r} {problem}")
    for key, value in extra_system.items():
        problem = value_problem(f"system.{key}", str(value))
        if problem:
            raise StateValueError(f"state file key system.{key}: {problem} (native/state-keys.toml)")
        lines.append(f"system.{key}={value}")
    frame = _BLOCKS.around(node)
    blocks = frame.blocks
    for gpu in node.gpus:
        mine = extra.get(gpu.index, _NO_KEYS)
        block = _kept_block(blocks, gpu, mine)
        if block is None:
            block = "\n".join(_device_block(node, gpu, frame.root_index, mine))
            blocks[gpu.index] = (gpu.config, mine, block)
        if block:
            lines.append(block)
    if frame.pci_functions:
        lines.append(frame.pci_functions)
    events = sorted((event.seq, gpu.index, event.code) for gpu in node.gpus for event in gpu.config.xid_events or [])
    if node.surface("pci").state == "failed":  # the bus failed: every GPU fell off it, after what happened before
        after = max((seq for seq, _, _ in events), default=0)
        events += [(after + 1 + n, gpu.index, XID_FALLEN_OFF_BUS) for n, gpu in enumerate(node.gpus)
                   if gpu.failure_mode != "fallen_off_bus"]
    for n, (seq, index, code) in enumerate(events[-MAX_XID_EVENTS:]):
        lines += [f"event.{n}.seq={seq}", f"event.{n}.device={index}", f"event.{n}.type=8", f"event.{n}.data={code}"]
    lines.append("end")
    return "\n".join(lines) + "\n"


def _device_block(node: Node, gpu: Gpu, root_index: Mapping[str, int], mine: Mapping[str, object]) -> list[str]:
    """GPU ``gpu``'s lines: its own keys, then the other surfaces' (``mine``) in place of any of the same name."""
    prefix = f"device.{gpu.index}."
    lines = _rendered(prefix, (pair for pair in _device(node, gpu, root_index) if pair[0] not in mine))
    lines += _mig_rows(prefix, gpu.config, mine)
    lines += _rendered(prefix, mine.items())
    return lines


def _rendered(prefix: str, pairs: Iterable[tuple[str, object]]) -> list[str]:
    lines: list[str] = []
    for key, value in pairs:
        if type(value) is str:
            text = "" if value == "N/A" else value  # an empty string is what the library reports as N/A
        elif value == 0 and key.startswith(ZERO_DEFAULT_PREFIXES):
            continue
        else:
            text = str(value)
        problem = _problem(key, value, text)
        if problem:
            raise StateValueError(f"state file key {prefix}{key}: {problem} (native/state-keys.toml)")
        lines.append(f"{prefix}{key}={text}")
    return lines


def _mig_rows(prefix: str, c: GpuConfig, mine: Mapping[str, object]) -> list[str]:
    """The lines of the board's MIG profile table, rendered once per table and GPU (a third of a block)."""
    if any(key.startswith("mig_profile.") for key in mine):
        return _rendered(prefix, (pair for pair in _mig_profiles(c) if pair[0] not in mine))
    found = _MIG_ROWS.get(prefix)
    if found is not None and found[0] is c.mig:
        return found[1]
    rows = _rendered(prefix, _mig_profiles(c))
    if len(_MIG_ROWS) >= _MIG_ROWS_MAX:
        _MIG_ROWS.clear()
    _MIG_ROWS[prefix] = (c.mig, rows)
    return rows


#: a GPU's line prefix -> (the MIG table its rows were rendered from, the rows); held, so compared by identity
_MIG_ROWS: dict[str, tuple[object, list[str]]] = {}
_MIG_ROWS_MAX = 1024


_NO_KEYS: Mapping[str, object] = {}
_MERGED: list[tuple[tuple[NvmlKeys, ...], dict[str, object], dict[int, dict[str, object]]]] = []


def _merged(contributed: tuple[NvmlKeys, ...]) -> tuple[dict[str, object], dict[int, dict[str, object]]]:
    """The other surfaces' keys, system and per GPU, later surfaces' in place of earlier ones'; the last
    merge again where the contributions are the very same objects (``plan_memo`` keeps those a change
    does not touch), so the kept device blocks compare their keys by identity."""
    last = _MERGED[0] if _MERGED else None
    if last is not None and len(last[0]) == len(contributed) and all(
            a is b for a, b in zip(last[0], contributed, strict=True)):
        return last[1], last[2]
    extra_system: dict[str, object] = {}
    extra: dict[int, dict[str, object]] = {}
    for keys in contributed:
        extra_system.update(keys.system)
        for index, contributed_pairs in keys.devices.items():
            extra.setdefault(index, {}).update(contributed_pairs)
    _MERGED[:] = [(contributed, extra_system, extra)]
    return extra_system, extra


class _Frame:
    """What one frame renders once: its device blocks by GPU index (configuration, contributed keys,
    text), its root complexes' indices and the lines of its other PCI functions."""

    __slots__ = ("blocks", "pci_functions", "root_index")

    def __init__(self, node: Node) -> None:
        self.blocks: dict[int, tuple[object, Mapping[str, object], str]] = {}
        self.root_index = {rc.id: i for i, rc in enumerate(node.root_complexes)}
        self.pci_functions = "\n".join(f"{key}={value}" for key, value in _pci_functions(node, self.root_index))


class _BlockMemo:
    """The device blocks of the last render, reused where a GPU's inputs are what they were.

    A block is a pure function of the GPU's configuration, its contributed keys and its frame: every
    field of the node but the GPUs, and every GPU's placement (all Gpu fields but ``config``:
    topology levels compare placements).  Values are immutable, so the same configuration object
    has the same values; a change made with ``nvml-mock-ctl`` replaces only the configurations it
    touches, so one changed GPU of 72 renders one block.  ``test_nvml_view`` renders random changes
    with and without the memo and compares.
    """

    def __init__(self) -> None:
        self.frame: tuple[object, ...] | None = None
        self.rendered: _Frame | None = None

    def around(self, node: Node) -> _Frame:
        """``node``'s frame as rendered: the last render's where the frame is the same, else a new one.

        Each render keeps to the frame it was given, so renders in two threads never mix their blocks."""
        frame = (*(getattr(node, name) for name in node.__slots__ if name != "gpus"),
                 *(tuple(getattr(gpu, name) for name in gpu.__slots__ if name != "config") for gpu in node.gpus))
        rendered = self.rendered
        if rendered is None or frame != self.frame:  # tuples compare items by identity first: cheap when kept
            rendered = _Frame(node)
            self.frame, self.rendered = frame, rendered
        else:  # an equal frame of other objects (another node of the same spec): the next compare is by identity
            self.frame = frame
        return rendered


def _kept_block(blocks: Mapping[int, tuple[object, Mapping[str, object], str]], gpu: Gpu,
                mine: Mapping[str, object]) -> str | None:
    kept = blocks.get(gpu.index)
    if kept is None or kept[0] is not gpu.config:
        return None
    return kept[2] if kept[1] is mine or kept[1] == mine else None


_BLOCKS = _BlockMemo()


@functools.lru_cache(maxsize=1 << 15, typed=True)
def _problem(key: str, value: object, text: str) -> str | None:
    """Why the library would refuse a device-block value (native/state-keys.toml), or None: integers
    against their key's range and plain strings against its size directly (thousands of values per
    render), anything else as the library parses its text.  Remembered: a process that renders
    again and again (the daemon, ``Node.ctl``) checks each value of each key once."""
    if key.startswith("nvlink.") and key[7:8].isdigit():
        scope, name = "link", key.split(".", 2)[2]
    elif key.startswith("process.") and key[8:9].isdigit():
        scope, name = "process", key.split(".", 2)[2]
    elif key.startswith("mig_profile.") and key[12:13].isdigit():
        scope, name = "migprofile", key.split(".", 2)[2]
    else:
        scope, name = "device", key
    kind = TYPES[scope].get(name)
    if kind is None:
        return None  # not the library's key: the key-table tests catch those
    if type(value) is int and kind in RANGES:
        low, high = RANGES[kind]
        high = MAXIMA.get((scope, name), high)
        return None if low <= value <= high else f"{value} is outside the {kind} range {low}..{high}"
    if kind == "str" and type(value) is str:
        if _CONTROL.search(text):
            return f"contains a control character: {text[:60]!r}"
        limit, size = SIZES[scope][name], len(text.encode())
        return None if size <= limit else f"is {size} bytes long (UTF-8), more than {limit}"
    return value_problem(f"device.0.{key}", text)


def write_nvml_state(node: Node, path: str | os.PathLike[str], contributed: Iterable[NvmlKeys] = ()) -> Path:
    """Write the state file atomically (temp file in the same directory, fsync, rename), mode 0644."""
    target = Path(path)
    atomic_write(target, render_nvml_state(node, contributed), durable=True)
    return target
