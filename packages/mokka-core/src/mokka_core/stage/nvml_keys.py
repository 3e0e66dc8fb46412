"""The NVML state-file keys (format: native/README.md).

Generated from native/state-keys.toml by native/tools/gen_state_keys.py (make -C native keys): do not edit.
"""

from __future__ import annotations

from types import MappingProxyType

HEADER = "mokka-nvml-state 1"
# first line of the setter record (device-scope keys NVML setters changed; stage/nvml_settings.py)
SETTINGS_HEADER = "mokka-nvml-settings 1"
# index limits (mokka.h): device.<i> < device, device.<i>.nvlink.<l> < link, ...
LIMITS = MappingProxyType({"device": 256, "link": 18, "process": 32, "migprofile": 16, "event": 256, "pcifn": 256})

# system.<key>: node-wide values; key -> value type
SYSTEM_TYPES = MappingProxyType({
    "driver_version": "str",
    "nvml_version": "str",
    "cuda_version": "u32",
    "init_error": "u32",
    "device_count": "u32",
    "fabric_ready_file": "str",
    "booted_ms": "u64",
})
SYSTEM_KEYS = frozenset(SYSTEM_TYPES)
# sized keys -> the bound the library accepts (str: UTF-8 bytes, u8list: entries, cpuset: ids <)
SYSTEM_SIZES: MappingProxyType[str, int] = MappingProxyType({
    "driver_version": 79,
    "nvml_version": 79,
    "fabric_ready_file": 511,
})

# device.<i>.<key>: one GPU ("N/A": the getter returns NOT_SUPPORTED); key -> value type
DEVICE_TYPES = MappingProxyType({
    "name": "str",
    "uuid": "str",
    "serial": "str",
    "board_part_number": "str",
    "gpu_part_number": "str",
    "addressing_mode": "i32",
    "sparse_mode": "i32",
    "vbios_version": "str",
    "inforom.image": "str",
    "inforom.oem": "str",
    "inforom.ecc": "str",
    "inforom.power": "str",
    "brand": "i32",
    "architecture": "i32",
    "cuda_cc_major": "i32",
    "cuda_cc_minor": "i32",
    "minor_number": "u32",
    "board_id": "u32",
    "multi_gpu_board": "u32",
    "module_id": "u32",
    "num_gpu_cores": "u32",
    "lost": "i32",
    "pci.bus_id": "str",
    "pci.device_id": "u32",
    "pci.subsystem_id": "u32",
    "pci.base_class": "u32",
    "pci.sub_class": "u32",
    "pcie.max_gen": "u32",
    "pcie.gpu_max_gen": "u32",
    "pcie.host_max_gen": "u32",
    "pcie.current_gen": "u32",
    "pcie.atomics_outbound": "u32",
    "pcie.atomics_inbound": "u32",
    "pcie.max_width": "u32",
    "pcie.current_width": "u32",
    "pcie.replay_counter": "u32",
    "pcie.tx_kbps": "u32",
    "pcie.rx_kbps": "u32",
    "memory.total": "u64",
    "memory.reserved": "u64",
    "memory.used": "u64",
    "memory.bus_width": "u32",
    "bar1.total": "u64",
    "bar1.used": "u64",
    "temperature.gpu": "u32",
    "temperature.memory": "u32",
    "temperature.shutdown": "u32",
    "temperature.slowdown": "u32",
    "temperature.mem_max": "u32",
    "temperature.gpu_max": "u32",
    "temperature.tlimit": "u32",
    "temperature.tlimit_shutdown": "i32",
    "temperature.tlimit_slowdown": "i32",
    "temperature.tlimit_mem_max": "i32",
    "temperature.tlimit_gpu_max": "i32",
    "power.supported": "u32",
    "power.usage_mw": "u32",
    "power.limit_mw": "u32",
    "power.enforced_limit_mw": "u32",
    "power.default_limit_mw": "u32",
    "power.min_limit_mw": "u32",
    "power.max_limit_mw": "u32",
    "power.module_limit_mw": "u32",
    "power.module_default_limit_mw": "u32",
    "power.module_min_limit_mw": "u32",
    "power.module_max_limit_mw": "u32",
    "power.management_mode": "u32",
    "power.energy_mj": "u64",
    "fan.count": "u32",
    "fan.speed": "u32",
    "clock.graphics.current": "u32",
    "clock.graphics.max": "u32",
    "clock.graphics.app": "u32",
    "clock.graphics.default_app": "u32",
    "clock.graphics.boost_max": "u32",
    "clock.sm.current": "u32",
    "clock.sm.max": "u32",
    "clock.sm.app": "u32",
    "clock.sm.default_app": "u32",
    "clock.sm.boost_max": "u32",
    "clock.memory.current": "u32",
    "clock.memory.max": "u32",
    "clock.memory.app": "u32",
    "clock.memory.default_app": "u32",
    "clock.memory.boost_max": "u32",
    "clock.video.current": "u32",
    "clock.video.max": "u32",
    "clock.video.app": "u32",
    "clock.video.default_app": "u32",
    "clock.video.boost_max": "u32",
    "clock.supported.0.memory": "u32",
    "clock.supported.0.graphics_lowest_khz": "u32",
    "clock.supported.0.graphics_step_khz": "u32",
    "clock.supported.0.graphics_rungs": "u32",
    "clock.supported.1.memory": "u32",
    "clock.supported.1.graphics_lowest_khz": "u32",
    "clock.supported.1.graphics_step_khz": "u32",
    "clock.supported.1.graphics_rungs": "u32",
    "clock.supported.2.memory": "u32",
    "clock.supported.2.graphics_lowest_khz": "u32",
    "clock.supported.2.graphics_step_khz": "u32",
    "clock.supported.2.graphics_rungs": "u32",
    "clock.supported.3.memory": "u32",
    "clock.supported.3.graphics_lowest_khz": "u32",
    "clock.supported.3.graphics_step_khz": "u32",
    "clock.supported.3.graphics_rungs": "u32",
    "clock.locked.graphics_min": "u32",
    "clock.locked.graphics_max": "u32",
    "clock.locked.memory_min": "u32",
    "clock.locked.memory_max": "u32",
    "clock.auto_boost": "i32",
    "clock.event_reasons": "u64",
    "clock.supported_event_reasons": "u64",
    "violation.power_ns": "u64",
    "violation.thermal_ns": "u64",
    "violation.sync_boost_ns": "u64",
    "pstate": "u32",
    "utilization.gpu": "u32",
    "utilization.memory": "u32",
    "utilization.encoder": "u32",
    "utilization.decoder": "u32",
    "utilization.jpeg": "u32",
    "utilization.ofa": "u32",
    "encoder.sessions": "u32",
    "encoder.fps": "u32",
    "encoder.latency_us": "u32",
    "fbc.sessions": "u32",
    "fbc.fps": "u32",
    "fbc.latency_us": "u32",
    "ecc.supported": "i32",
    "ecc.current": "u32",
    "ecc.pending": "u32",
    "ecc.default": "u32",
    "ecc.volatile.corrected.l1": "u64",
    "ecc.volatile.corrected.l2": "u64",
    "ecc.volatile.corrected.dram": "u64",
    "ecc.volatile.corrected.register": "u64",
    "ecc.volatile.corrected.texture": "u64",
    "ecc.volatile.corrected.cbu": "u64",
    "ecc.volatile.corrected.sram": "u64",
    "ecc.volatile.uncorrected.l1": "u64",
    "ecc.volatile.uncorrected.l2": "u64",
    "ecc.volatile.uncorrected.dram": "u64",
    "ecc.volatile.uncorrected.register": "u64",
    "ecc.volatile.uncorrected.texture": "u64",
    "ecc.volatile.uncorrected.cbu": "u64",
    "ecc.volatile.uncorrected.sram": "u64",
    "ecc.aggregate.corrected.l1": "u64",
    "ecc.aggregate.corrected.l2": "u64",
    "ecc.aggregate.corrected.dram": "u64",
    "ecc.aggregate.corrected.register": "u64",
    "ecc.aggregate.corrected.texture": "u64",
    "ecc.aggregate.corrected.cbu": "u64",
    "ecc.aggregate.corrected.sram": "u64",
    "ecc.aggregate.uncorrected.l1": "u64",
    "ecc.aggregate.uncorrected.l2": "u64",
    "ecc.aggregate.uncorrected.dram": "u64",
    "ecc.aggregate.uncorrected.register": "u64",
    "ecc.aggregate.uncorrected.texture": "u64",
    "ecc.aggregate.uncorrected.cbu": "u64",
    "ecc.aggregate.uncorrected.sram": "u64",
    "ecc.sram_threshold_exceeded": "u32",
    "retired_pages.supported": "u32",
    "retired_pages.sbe": "u32",
    "retired_pages.dbe": "u32",
    "retired_pages.pending": "u32",
    "remapped_rows.supported": "u32",
    "remapped_rows.correctable": "u32",
    "remapped_rows.uncorrectable": "u32",
    "remapped_rows.pending": "u32",
    "remapped_rows.failure": "u32",
    "remapped_rows.histogram.max": "u32",
    "remapped_rows.histogram.high": "u32",
    "remapped_rows.histogram.partial": "u32",
    "remapped_rows.histogram.low": "u32",
    "remapped_rows.histogram.none": "u32",
    "persistence_mode": "u32",
    "compute_mode": "u32",
    "display_mode": "u32",
    "display_active": "u32",
    "accounting_mode": "u32",
    "accounting_buffer_size": "u32",
    "virtualization_mode": "u32",
    "host_vgpu_mode": "i32",
    "driver_model": "i32",
    "gpu_operation_mode.current": "i32",
    "gpu_operation_mode.pending": "i32",
    "gsp.mode": "u32",
    "gsp.default_mode": "u32",
    "gsp.version": "str",
    "mig.current": "i32",
    "mig.pending": "i32",
    "mig.gpu_instances": "u8list",
    "mig.compute_instances": "u8list",
    "mig.max_devices": "u32",
    "fabric.supported": "u32",
    "fabric.cluster_uuid": "str",
    "fabric.clique_id": "u32",
    "fabric.state": "u32",
    "fabric.status": "u32",
    "fabric.health_mask": "u32",
    "fabric.auto": "u32",
    "c2c.supported": "u32",
    "c2c.enabled": "u32",
    "pdi": "u64",
    "irq": "u32",
    "platform.supported": "u32",
    "platform.chassis_serial": "str",
    "platform.slot_number": "u32",
    "platform.tray_index": "u32",
    "platform.host_id": "u32",
    "platform.peer_type": "u32",
    "numa_node": "i32",
    "gpu_numa_node": "i32",
    "root_complex": "i32",
    "pcie_switch": "i32",
    "cpu_affinity": "cpuset",
    "topology.levels": "u8list",
    "topology.nvlinks": "u8list",
    "dynamic.seed": "u64",
    "dynamic.temperature": "u32",
    "dynamic.temperature.base_c": "u32",
    "dynamic.temperature.variance_c": "u32",
    "dynamic.temperature.ramp_c": "u32",
    "dynamic.temperature.ramp_period_s": "u32",
    "dynamic.power": "u32",
    "dynamic.power.base_mw": "u32",
    "dynamic.power.variance_mw": "u32",
    "dynamic.utilization": "u32",
    "dynamic.utilization.pattern": "u32",
    "dynamic.utilization.gpu_min": "u32",
    "dynamic.utilization.gpu_max": "u32",
    "dynamic.utilization.memory_min": "u32",
    "dynamic.utilization.memory_max": "u32",
    "dynamic.utilization.burst_period_s": "u32",
    "nvlink.count": "u32",
    "nvlink.version": "u32",
    "nvlink.speed_mbps": "u32",
    "nvlink.nvswitch_links": "u32",
    "nvlink_error.rate_milli": "u64",
    "nvlink_error.epoch_ms": "u64",
    "failure.mode": "u32",
    "failure.after_calls": "u64",
    "failure.probability_ppb": "u32",
    "failure.seed": "u64",
    "failure.xid": "u32",
    "gpm.supported": "u32",
    "gpm.pcie_tx_mib_per_sec": "u32",
    "gpm.pcie_rx_mib_per_sec": "u32",
    "fan.target_speed": "i32",
    "conf_compute.supported": "u32",
    "app_clocks.unrestricted": "u32",
    "temperature.target": "u32",
    "temperature.target_min": "u32",
    "temperature.target_max": "u32",
    "temperature.tlimit_reference": "u32",
    "inforom.bbx_flush_us": "u32",
    "hostname": "str",
})
DEVICE_KEYS = frozenset(DEVICE_TYPES)
# sized keys -> the bound the library accepts (str: UTF-8 bytes, u8list: entries, cpuset: ids <)
DEVICE_SIZES: MappingProxyType[str, int] = MappingProxyType({
    "name": 95,
    "uuid": 95,
    "serial": 31,
    "board_part_number": 31,
    "gpu_part_number": 31,
    "vbios_version": 31,
    "inforom.image": 31,
    "inforom.oem": 15,
    "inforom.ecc": 15,
    "inforom.power": 15,
    "pci.bus_id": 31,
    "gsp.version": 31,
    "mig.gpu_instances": 24,
    "mig.compute_instances": 32,
    "fabric.cluster_uuid": 47,
    "platform.chassis_serial": 15,
    "cpu_affinity": 1024,
    "topology.levels": 256,
    "topology.nvlinks": 256,
    "hostname": 63,
})

# device.<i>.nvlink.<l>.<key>: one NVLink of a GPU; key -> value type
LINK_TYPES = MappingProxyType({
    "state": "u32",
    "remote_type": "u32",
    "remote_bus_id": "str",
    "remote_device_id": "u32",
    "version": "u32",
    "errors.replay": "u64",
    "errors.recovery": "u64",
    "errors.crc_flit": "u64",
    "errors.crc_data": "u64",
    "errors.ecc": "u64",
    "tx_bytes": "u64",
    "rx_bytes": "u64",
    "errors.inject": "u32",
    "errors.injected": "u64",
})
LINK_KEYS = frozenset(LINK_TYPES)
# sized keys -> the bound the library accepts (str: UTF-8 bytes, u8list: entries, cpuset: ids <)
LINK_SIZES: MappingProxyType[str, int] = MappingProxyType({
    "remote_bus_id": 31,
})

# device.<i>.process.<p>.<key>: one process on a GPU (`pid` required); key -> value type
PROCESS_TYPES = MappingProxyType({
    "pid": "u32",
    "type": "u32",
    "used_bytes": "u64",
    "sm_util": "u32",
    "mem_util": "u32",
    "enc_util": "u32",
    "dec_util": "u32",
    "name": "str",
})
PROCESS_KEYS = frozenset(PROCESS_TYPES)
# sized keys -> the bound the library accepts (str: UTF-8 bytes, u8list: entries, cpuset: ids <)
PROCESS_SIZES: MappingProxyType[str, int] = MappingProxyType({
    "name": 127,
})

# device.<i>.mig_profile.<p>.<key>: a GPU-instance profile of a MIG-capable GPU (`mig -lgip`); key -> value type
MIGPROFILE_TYPES = MappingProxyType({
    "profile": "u32",
    "id": "u32",
    "name": "str",
    "slices": "u32",
    "instances": "u32",
    "memory_mb": "u64",
    "sms": "u32",
    "copy_engines": "u32",
    "decoders": "u32",
    "encoders": "u32",
    "jpegs": "u32",
    "ofas": "u32",
    "placement_size": "u32",
    "placements": "u8list",
})
MIGPROFILE_KEYS = frozenset(MIGPROFILE_TYPES)
# sized keys -> the bound the library accepts (str: UTF-8 bytes, u8list: entries, cpuset: ids <)
MIGPROFILE_SIZES: MappingProxyType[str, int] = MappingProxyType({
    "name": 31,
    "placements": 8,
})

# event.<n>.<key>: Xid and other device events; key -> value type
EVENT_TYPES = MappingProxyType({
    "seq": "u64",
    "device": "u32",
    "type": "u64",
    "data": "u64",
})
EVENT_KEYS = frozenset(EVENT_TYPES)
# sized keys -> the bound the library accepts (str: UTF-8 bytes, u8list: entries, cpuset: ids <)
EVENT_SIZES: MappingProxyType[str, int] = MappingProxyType({
})

# pcifn.<n>.<key>: PCI functions that are not GPUs: HCAs, PCI-visible NVSwitches; key -> value type
PCIFN_TYPES = MappingProxyType({
    "bus_id": "str",
    "root_complex": "i32",
    "pcie_switch": "i32",
    "numa_node": "i32",
})
PCIFN_KEYS = frozenset(PCIFN_TYPES)
# sized keys -> the bound the library accepts (str: UTF-8 bytes, u8list: entries, cpuset: ids <)
PCIFN_SIZES: MappingProxyType[str, int] = MappingProxyType({
    "bus_id": 31,
})

# numeric types -> the (lowest, highest) value the library accepts (u8list: of each entry)
RANGES = MappingProxyType({
    "u32": (0, 4294967295),
    "i32": (-2147483648, 2147483647),
    "u64": (0, 18446744073709551615),
    "u8list": (0, 255),
})

# numeric keys the library bounds below their type's range -> (scope, key) -> the highest value
MAXIMA = MappingProxyType({
    ("device", "mig.max_devices"): 8,
})

KEYS = MappingProxyType({
    "system": SYSTEM_KEYS,
    "device": DEVICE_KEYS,
    "link": LINK_KEYS,
    "process": PROCESS_KEYS,
    "migprofile": MIGPROFILE_KEYS,
    "event": EVENT_KEYS,
    "pcifn": PCIFN_KEYS,
})

TYPES = MappingProxyType({
    "system": SYSTEM_TYPES,
    "device": DEVICE_TYPES,
    "link": LINK_TYPES,
    "process": PROCESS_TYPES,
    "migprofile": MIGPROFILE_TYPES,
    "event": EVENT_TYPES,
    "pcifn": PCIFN_TYPES,
})

SIZES = MappingProxyType({
    "system": SYSTEM_SIZES,
    "device": DEVICE_SIZES,
    "link": LINK_SIZES,
    "process": PROCESS_SIZES,
    "migprofile": MIGPROFILE_SIZES,
    "event": EVENT_SIZES,
    "pcifn": PCIFN_SIZES,
})

# one constant per key that is not part of a family (families: see *_KEYS)
SYSTEM_DRIVER_VERSION = "driver_version"
SYSTEM_NVML_VERSION = "nvml_version"
SYSTEM_CUDA_VERSION = "cuda_version"
SYSTEM_INIT_ERROR = "init_error"
SYSTEM_DEVICE_COUNT = "device_count"
SYSTEM_FABRIC_READY_FILE = "fabric_ready_file"
SYSTEM_BOOTED_MS = "booted_ms"
DEVICE_NAME = "name"
DEVICE_UUID = "uuid"
DEVICE_SERIAL = "serial"
DEVICE_BOARD_PART_NUMBER = "board_part_number"
DEVICE_GPU_PART_NUMBER = "gpu_part_number"
DEVICE_ADDRESSING_MODE = "addressing_mode"
DEVICE_SPARSE_MODE = "sparse_mode"
DEVICE_VBIOS_VERSION = "vbios_version"
DEVICE_INFOROM_IMAGE = "inforom.image"
DEVICE_INFOROM_OEM = "inforom.oem"
DEVICE_INFOROM_ECC = "inforom.ecc"
DEVICE_INFOROM_POWER = "inforom.power"
DEVICE_BRAND = "brand"
DEVICE_ARCHITECTURE = "architecture"
DEVICE_CUDA_CC_MAJOR = "cuda_cc_major"
DEVICE_CUDA_CC_MINOR = "cuda_cc_minor"
DEVICE_MINOR_NUMBER = "minor_number"
DEVICE_BOARD_ID = "board_id"
DEVICE_MULTI_GPU_BOARD = "multi_gpu_board"
DEVICE_MODULE_ID = "module_id"
DEVICE_NUM_GPU_CORES = "num_gpu_cores"
DEVICE_LOST = "lost"
DEVICE_PCI_BUS_ID = "pci.bus_id"
DEVICE_PCI_DEVICE_ID = "pci.device_id"
DEVICE_PCI_SUBSYSTEM_ID = "pci.subsystem_id"
DEVICE_PCI_BASE_CLASS = "pci.base_class"
DEVICE_PCI_SUB_CLASS = "pci.sub_class"
DEVICE_PCIE_MAX_GEN = "pcie.max_gen"
DEVICE_PCIE_GPU_MAX_GEN = "pcie.gpu_max_gen"
DEVICE_PCIE_HOST_MAX_GEN = "pcie.host_max_gen"
DEVICE_PCIE_CURRENT_GEN = "pcie.current_gen"
DEVICE_PCIE_ATOMICS_OUTBOUND = "pcie.atomics_outbound"
DEVICE_PCIE_ATOMICS_INBOUND = "pcie.atomics_inbound"
DEVICE_PCIE_MAX_WIDTH = "pcie.max_width"
DEVICE_PCIE_CURRENT_WIDTH = "pcie.current_width"
DEVICE_PCIE_REPLAY_COUNTER = "pcie.replay_counter"
DEVICE_PCIE_TX_KBPS = "pcie.tx_kbps"
DEVICE_PCIE_RX_KBPS = "pcie.rx_kbps"
DEVICE_MEMORY_TOTAL = "memory.total"
DEVICE_MEMORY_RESERVED = "memory.reserved"
DEVICE_MEMORY_USED = "memory.used"
DEVICE_MEMORY_BUS_WIDTH = "memory.bus_width"
DEVICE_BAR1_TOTAL = "bar1.total"
DEVICE_BAR1_USED = "bar1.used"
DEVICE_TEMPERATURE_GPU = "temperature.gpu"
DEVICE_TEMPERATURE_MEMORY = "temperature.memory"
DEVICE_TEMPERATURE_SHUTDOWN = "temperature.shutdown"
DEVICE_TEMPERATURE_SLOWDOWN = "temperature.slowdown"
DEVICE_TEMPERATURE_MEM_MAX = "temperature.mem_max"
DEVICE_TEMPERATURE_GPU_MAX = "temperature.gpu_max"
DEVICE_TEMPERATURE_TLIMIT = "temperature.tlimit"
DEVICE_TEMPERATURE_TLIMIT_SHUTDOWN = "temperature.tlimit_shutdown"
DEVICE_TEMPERATURE_TLIMIT_SLOWDOWN = "temperature.tlimit_slowdown"
DEVICE_TEMPERATURE_TLIMIT_MEM_MAX = "temperature.tlimit_mem_max"
DEVICE_TEMPERATURE_TLIMIT_GPU_MAX = "temperature.tlimit_gpu_max"
DEVICE_POWER_SUPPORTED = "power.supported"
DEVICE_POWER_USAGE_MW = "power.usage_mw"
DEVICE_POWER_LIMIT_MW = "power.limit_mw"
DEVICE_POWER_ENFORCED_LIMIT_MW = "power.enforced_limit_mw"
DEVICE_POWER_DEFAULT_LIMIT_MW = "power.default_limit_mw"
DEVICE_POWER_MIN_LIMIT_MW = "power.min_limit_mw"
DEVICE_POWER_MAX_LIMIT_MW = "power.max_limit_mw"
DEVICE_POWER_MODULE_LIMIT_MW = "power.module_limit_mw"
DEVICE_POWER_MODULE_DEFAULT_LIMIT_MW = "power.module_default_limit_mw"
DEVICE_POWER_MODULE_MIN_LIMIT_MW = "power.module_min_limit_mw"
DEVICE_POWER_MODULE_MAX_LIMIT_MW = "power.module_max_limit_mw"
DEVICE_POWER_MANAGEMENT_MODE = "power.management_mode"
DEVICE_POWER_ENERGY_MJ = "power.energy_mj"
DEVICE_FAN_COUNT = "fan.count"
DEVICE_FAN_SPEED = "fan.speed"
DEVICE_CLOCK_AUTO_BOOST = "clock.auto_boost"
DEVICE_CLOCK_EVENT_REASONS = "clock.event_reasons"
DEVICE_CLOCK_SUPPORTED_EVENT_REASONS = "clock.supported_event_reasons"
DEVICE_VIOLATION_POWER_NS = "violation.power_ns"
DEVICE_VIOLATION_THERMAL_NS = "violation.thermal_ns"
DEVICE_VIOLATION_SYNC_BOOST_NS = "violation.sync_boost_ns"
DEVICE_PSTATE = "pstate"
DEVICE_UTILIZATION_GPU = "utilization.gpu"
DEVICE_UTILIZATION_MEMORY = "utilization.memory"
DEVICE_UTILIZATION_ENCODER = "utilization.encoder"
DEVICE_UTILIZATION_DECODER = "utilization.decoder"
DEVICE_UTILIZATION_JPEG = "utilization.jpeg"
DEVICE_UTILIZATION_OFA = "utilization.ofa"
DEVICE_ENCODER_SESSIONS = "encoder.sessions"
DEVICE_ENCODER_FPS = "encoder.fps"
DEVICE_ENCODER_LATENCY_US = "encoder.latency_us"
DEVICE_FBC_SESSIONS = "fbc.sessions"
DEVICE_FBC_FPS = "fbc.fps"
DEVICE_FBC_LATENCY_US = "fbc.latency_us"
DEVICE_ECC_SUPPORTED = "ecc.supported"
DEVICE_ECC_CURRENT = "ecc.current"
DEVICE_ECC_PENDING = "ecc.pending"
DEVICE_ECC_DEFAULT = "ecc.default"
DEVICE_ECC_SRAM_THRESHOLD_EXCEEDED = "ecc.sram_threshold_exceeded"
DEVICE_RETIRED_PAGES_SUPPORTED = "retired_pages.supported"
DEVICE_RETIRED_PAGES_SBE = "retired_pages.sbe"
DEVICE_RETIRED_PAGES_DBE = "retired_pages.dbe"
DEVICE_RETIRED_PAGES_PENDING = "retired_pages.pending"
DEVICE_REMAPPED_ROWS_SUPPORTED = "remapped_rows.supported"
DEVICE_REMAPPED_ROWS_CORRECTABLE = "remapped_rows.correctable"
DEVICE_REMAPPED_ROWS_UNCORRECTABLE = "remapped_rows.uncorrectable"
DEVICE_REMAPPED_ROWS_PENDING = "remapped_rows.pending"
DEVICE_REMAPPED_ROWS_FAILURE = "remapped_rows.failure"
DEVICE_PERSISTENCE_MODE = "persistence_mode"
DEVICE_COMPUTE_MODE = "compute_mode"
DEVICE_DISPLAY_MODE = "display_mode"
DEVICE_DISPLAY_ACTIVE = "display_active"
DEVICE_ACCOUNTING_MODE = "accounting_mode"
DEVICE_ACCOUNTING_BUFFER_SIZE = "accounting_buffer_size"
DEVICE_VIRTUALIZATION_MODE = "virtualization_mode"
DEVICE_HOST_VGPU_MODE = "host_vgpu_mode"
DEVICE_DRIVER_MODEL = "driver_model"
DEVICE_GPU_OPERATION_MODE_CURRENT = "gpu_operation_mode.current"
DEVICE_GPU_OPERATION_MODE_PENDING = "gpu_operation_mode.pending"
DEVICE_GSP_MODE = "gsp.mode"
DEVICE_GSP_DEFAULT_MODE = "gsp.default_mode"
DEVICE_GSP_VERSION = "gsp.version"
DEVICE_MIG_CURRENT = "mig.current"
DEVICE_MIG_PENDING = "mig.pending"
DEVICE_MIG_GPU_INSTANCES = "mig.gpu_instances"
DEVICE_MIG_COMPUTE_INSTANCES = "mig.compute_instances"
DEVICE_MIG_MAX_DEVICES = "mig.max_devices"
DEVICE_FABRIC_SUPPORTED = "fabric.supported"
DEVICE_FABRIC_CLUSTER_UUID = "fabric.cluster_uuid"
DEVICE_FABRIC_CLIQUE_ID = "fabric.clique_id"
DEVICE_FABRIC_STATE = "fabric.state"
DEVICE_FABRIC_STATUS = "fabric.status"
DEVICE_FABRIC_HEALTH_MASK = "fabric.health_mask"
DEVICE_FABRIC_AUTO = "fabric.auto"
DEVICE_C2C_SUPPORTED = "c2c.supported"
DEVICE_C2C_ENABLED = "c2c.enabled"
DEVICE_PDI = "pdi"
DEVICE_IRQ = "irq"
DEVICE_PLATFORM_SUPPORTED = "platform.supported"
DEVICE_PLATFORM_CHASSIS_SERIAL = "platform.chassis_serial"
DEVICE_PLATFORM_SLOT_NUMBER = "platform.slot_number"
DEVICE_PLATFORM_TRAY_INDEX = "platform.tray_index"
DEVICE_PLATFORM_HOST_ID = "platform.host_id"
DEVICE_PLATFORM_PEER_TYPE = "platform.peer_type"
DEVICE_NUMA_NODE = "numa_node"
DEVICE_GPU_NUMA_NODE = "gpu_numa_node"
DEVICE_ROOT_COMPLEX = "root_complex"
DEVICE_PCIE_SWITCH = "pcie_switch"
DEVICE_CPU_AFFINITY = "cpu_affinity"
DEVICE_TOPOLOGY_LEVELS = "topology.levels"
DEVICE_TOPOLOGY_NVLINKS = "topology.nvlinks"
DEVICE_DYNAMIC_SEED = "dynamic.seed"
DEVICE_DYNAMIC_TEMPERATURE = "dynamic.temperature"
DEVICE_DYNAMIC_TEMPERATURE_BASE_C = "dynamic.temperature.base_c"
DEVICE_DYNAMIC_TEMPERATURE_VARIANCE_C = "dynamic.temperature.variance_c"
DEVICE_DYNAMIC_TEMPERATURE_RAMP_C = "dynamic.temperature.ramp_c"
DEVICE_DYNAMIC_TEMPERATURE_RAMP_PERIOD_S = "dynamic.temperature.ramp_period_s"
DEVICE_DYNAMIC_POWER = "dynamic.power"
DEVICE_DYNAMIC_POWER_BASE_MW = "dynamic.power.base_mw"
DEVICE_DYNAMIC_POWER_VARIANCE_MW = "dynamic.power.variance_mw"
DEVICE_DYNAMIC_UTILIZATION = "dynamic.utilization"
DEVICE_DYNAMIC_UTILIZATION_PATTERN = "dynamic.utilization.pattern"
DEVICE_DYNAMIC_UTILIZATION_GPU_MIN = "dynamic.utilization.gpu_min"
DEVICE_DYNAMIC_UTILIZATION_GPU_MAX = "dynamic.utilization.gpu_max"
DEVICE_DYNAMIC_UTILIZATION_MEMORY_MIN = "dynamic.utilization.memory_min"
DEVICE_DYNAMIC_UTILIZATION_MEMORY_MAX = "dynamic.utilization.memory_max"
DEVICE_DYNAMIC_UTILIZATION_BURST_PERIOD_S = "dynamic.utilization.burst_period_s"
DEVICE_NVLINK_COUNT = "nvlink.count"
DEVICE_NVLINK_VERSION = "nvlink.version"
DEVICE_NVLINK_SPEED_MBPS = "nvlink.speed_mbps"
DEVICE_NVLINK_NVSWITCH_LINKS = "nvlink.nvswitch_links"
DEVICE_NVLINK_ERROR_RATE_MILLI = "nvlink_error.rate_milli"
DEVICE_NVLINK_ERROR_EPOCH_MS = "nvlink_error.epoch_ms"
DEVICE_FAILURE_MODE = "failure.mode"
DEVICE_FAILURE_AFTER_CALLS = "failure.after_calls"
DEVICE_FAILURE_PROBABILITY_PPB = "failure.probability_ppb"
DEVICE_FAILURE_SEED = "failure.seed"
DEVICE_FAILURE_XID = "failure.xid"
DEVICE_GPM_SUPPORTED = "gpm.supported"
DEVICE_GPM_PCIE_TX_MIB_PER_SEC = "gpm.pcie_tx_mib_per_sec"
DEVICE_GPM_PCIE_RX_MIB_PER_SEC = "gpm.pcie_rx_mib_per_sec"
DEVICE_FAN_TARGET_SPEED = "fan.target_speed"
DEVICE_CONF_COMPUTE_SUPPORTED = "conf_compute.supported"
DEVICE_APP_CLOCKS_UNRESTRICTED = "app_clocks.unrestricted"
DEVICE_TEMPERATURE_TARGET = "temperature.target"
DEVICE_TEMPERATURE_TARGET_MIN = "temperature.target_min"
DEVICE_TEMPERATURE_TARGET_MAX = "temperature.target_max"
DEVICE_TEMPERATURE_TLIMIT_REFERENCE = "temperature.tlimit_reference"
DEVICE_INFOROM_BBX_FLUSH_US = "inforom.bbx_flush_us"
DEVICE_HOSTNAME = "hostname"
LINK_STATE = "state"
LINK_REMOTE_TYPE = "remote_type"
LINK_REMOTE_BUS_ID = "remote_bus_id"
LINK_REMOTE_DEVICE_ID = "remote_device_id"
LINK_VERSION = "version"
LINK_ERRORS_REPLAY = "errors.replay"
LINK_ERRORS_RECOVERY = "errors.recovery"
LINK_ERRORS_CRC_FLIT = "errors.crc_flit"
LINK_ERRORS_CRC_DATA = "errors.crc_data"
LINK_ERRORS_ECC = "errors.ecc"
LINK_TX_BYTES = "tx_bytes"
LINK_RX_BYTES = "rx_bytes"
LINK_ERRORS_INJECT = "errors.inject"
LINK_ERRORS_INJECTED = "errors.injected"
PROCESS_PID = "pid"
PROCESS_TYPE = "type"
PROCESS_USED_BYTES = "used_bytes"
PROCESS_SM_UTIL = "sm_util"
PROCESS_MEM_UTIL = "mem_util"
PROCESS_ENC_UTIL = "enc_util"
PROCESS_DEC_UTIL = "dec_util"
PROCESS_NAME = "name"
MIGPROFILE_PROFILE = "profile"
MIGPROFILE_ID = "id"
MIGPROFILE_NAME = "name"
MIGPROFILE_SLICES = "slices"
MIGPROFILE_INSTANCES = "instances"
MIGPROFILE_MEMORY_MB = "memory_mb"
MIGPROFILE_SMS = "sms"
MIGPROFILE_COPY_ENGINES = "copy_engines"
MIGPROFILE_DECODERS = "decoders"
MIGPROFILE_ENCODERS = "encoders"
MIGPROFILE_JPEGS = "jpegs"
MIGPROFILE_OFAS = "ofas"
MIGPROFILE_PLACEMENT_SIZE = "placement_size"
MIGPROFILE_PLACEMENTS = "placements"
EVENT_SEQ = "seq"
EVENT_DEVICE = "device"
EVENT_TYPE = "type"
EVENT_DATA = "data"
PCIFN_BUS_ID = "bus_id"
PCIFN_ROOT_COMPLEX = "root_complex"
PCIFN_PCIE_SWITCH = "pcie_switch"
PCIFN_NUMA_NODE = "numa_node"
