"""The GPU profile: pydantic models for the established nvml-mock profile format.

A profile describes one node type: the system (driver, CUDA), per-GPU defaults,
optional per-device entries, NVLink, PCIe topology and InfiniBand.  Every
surface derives its files from the *resolved* form (see ``state.py``), never
from these raw models directly.

Models are strict (``extra="forbid"``); the loader strips unknown keys from a
profile with a warning before validation and rejects them in an override.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

BUS_ID_RE = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
ROOT_COMPLEX_RE = re.compile(r"^pci[0-9a-fA-F]{4}:[0-9a-fA-F]{2}$")

Architecture = Literal[
    "kepler", "maxwell", "pascal", "volta", "turing", "ampere",
    "ada", "ada_lovelace", "hopper", "blackwell",
]
Brand = Literal["nvidia", "tesla", "quadro", "geforce", "titan", "nvidia_rtx"]
Mode = Literal["enabled", "disabled"]
PState = Annotated[str, Field(pattern=r"^P([0-9]|1[0-5])$")]
NonNeg = Annotated[int, Field(ge=0)]


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class System(Model):
    driver_version: Annotated[str, Field(pattern=r"^\d+\.\d+(\.\d+)?$")]
    nvml_version: str | None = None
    cuda_version: str | None = None
    cuda_version_major: NonNeg = 12
    cuda_version_minor: NonNeg = 4
    num_devices: Annotated[int, Field(ge=1)] | None = None


class ComputeCapability(Model):
    major: NonNeg
    minor: NonNeg


class Inforom(Model):
    image_version: str = ""
    oem_object: str = ""
    ecc_object: str = ""
    pwr_object: str = ""


class Memory(Model):
    total_bytes: Annotated[int, Field(gt=0)]
    reserved_bytes: NonNeg = 0
    free_bytes: NonNeg | None = None
    used_bytes: NonNeg | None = None
    memory_bus_width: NonNeg = 0

    @model_validator(mode="after")
    def _fits(self) -> Memory:
        if self.free_bytes is not None and self.free_bytes > self.total_bytes:
            raise ValueError(
                f"free_bytes ({self.free_bytes}) must not exceed total_bytes ({self.total_bytes})"
            )
        if self.used_bytes is not None and self.used_bytes > self.total_bytes:
            raise ValueError(
                f"used_bytes ({self.used_bytes}) must not exceed total_bytes ({self.total_bytes})"
            )
        return self


class Bar1Memory(Model):
    total_bytes: Annotated[int, Field(gt=0)]
    free_bytes: NonNeg | None = None
    used_bytes: NonNeg | None = None


class Pci(Model):
    device_id: NonNeg | None = None
    subsystem_id: NonNeg | None = None
    bus_id: str | None = None
    revision: NonNeg = 0xA1

    @field_validator("device_id", "subsystem_id", mode="before")
    @classmethod
    def _hex(cls, value: object) -> object:
        if isinstance(value, str):
            return int(value, 16) if value.lower().startswith("0x") else int(value)
        return value

    @field_validator("bus_id")
    @classmethod
    def _bus_id(cls, value: str | None) -> str | None:
        if value is not None and not BUS_ID_RE.match(value):
            raise ValueError(f"must look like DDDD:BB:DD.F (e.g. 0000:1a:00.0), got {value!r}")
        return value.lower() if value else value


class Pcie(Model):
    max_link_gen: Annotated[int, Field(ge=1, le=6)] | None = None
    current_link_gen: Annotated[int, Field(ge=1, le=6)] | None = None
    max_link_width: Annotated[int, Field(ge=1, le=32)] | None = None
    current_link_width: Annotated[int, Field(ge=1, le=32)] | None = None
    replay_counter: NonNeg = 0
    tx_throughput_kbps: NonNeg = 0
    rx_throughput_kbps: NonNeg = 0


class Power(Model):
    management_supported: bool = True
    management_mode: Mode = "enabled"
    default_limit_mw: NonNeg
    enforced_limit_mw: NonNeg | None = None
    min_limit_mw: NonNeg = 0
    max_limit_mw: NonNeg | None = None
    current_draw_mw: NonNeg = 0
    power_state: str | None = None
    total_energy_consumption_mj: NonNeg = 0

    @model_validator(mode="after")
    def _limits(self) -> Power:
        top = self.max_limit_mw if self.max_limit_mw is not None else self.default_limit_mw
        if self.min_limit_mw > top:
            raise ValueError(f"min_limit_mw ({self.min_limit_mw}) exceeds max_limit_mw ({top})")
        return self


class Thermal(Model):
    temperature_gpu_c: Annotated[int, Field(ge=0, le=200)]
    temperature_memory_c: Annotated[int, Field(ge=0, le=200)] = 0
    shutdown_threshold_c: NonNeg = 0
    slowdown_threshold_c: NonNeg = 0
    max_operating_c: NonNeg = 0
    target_temperature_c: NonNeg = 0


class Fan(Model):
    count: NonNeg = 0
    speed_percent: Annotated[int, Field(ge=0, le=100)] | Literal["N/A"] = "N/A"
    target_speed_percent: Annotated[int, Field(ge=0, le=100)] | None = None

    @field_validator("speed_percent", mode="before")
    @classmethod
    def _numeric_string(cls, value: object) -> object:
        if isinstance(value, str) and value.isdigit():
            return int(value)
        return value


class Clocks(Model):
    graphics_current: NonNeg = 0
    graphics_max: NonNeg = 0
    graphics_app: NonNeg = 0
    graphics_app_default: NonNeg = 0
    sm_current: NonNeg = 0
    sm_max: NonNeg = 0
    memory_current: NonNeg = 0
    memory_max: NonNeg = 0
    memory_app: NonNeg = 0
    memory_app_default: NonNeg = 0
    video_current: NonNeg = 0
    video_max: NonNeg = 0


class ThrottleCounters(Model):
    sw_power_cap_us: NonNeg = 0
    sync_boost_us: NonNeg = 0
    sw_thermal_slowdown_us: NonNeg = 0
    hw_thermal_slowdown_us: NonNeg = 0
    hw_power_brake_slowdown_us: NonNeg = 0


class ThrottleReasons(Model):
    gpu_idle: bool = False
    applications_clocks_setting: bool = False
    sw_power_cap: bool = False
    hw_slowdown: bool = False
    hw_thermal_slowdown: bool = False
    hw_power_brake_slowdown: bool = False
    sync_boost: bool = False
    sw_thermal_slowdown: bool = False
    display_clocks_setting: bool = False
    counters: ThrottleCounters = ThrottleCounters()


class SupportedMemoryClock(Model):
    freq_mhz: NonNeg
    graphics_clocks: list[NonNeg] = []


class SupportedClocks(Model):
    memory_clocks: list[SupportedMemoryClock] = []


class Utilization(Model):
    gpu: Annotated[int, Field(ge=0, le=100)] = 0
    memory: Annotated[int, Field(ge=0, le=100)] = 0
    encoder: Annotated[int, Field(ge=0, le=100)] = 0
    decoder: Annotated[int, Field(ge=0, le=100)] = 0
    jpeg: Annotated[int, Field(ge=0, le=100)] = 0
    ofa: Annotated[int, Field(ge=0, le=100)] = 0


class SessionStats(Model):
    session_count: NonNeg = 0
    average_fps: NonNeg = 0
    average_latency_us: NonNeg = 0


class EccLocations(Model):
    device_memory: NonNeg = 0
    l1_cache: NonNeg = 0
    l2_cache: NonNeg = 0
    register_file: NonNeg = 0
    texture_memory: NonNeg = 0
    total: NonNeg = 0


class EccBitCounts(Model):
    single_bit: EccLocations = EccLocations()
    double_bit: EccLocations = EccLocations()


class EccErrors(Model):
    volatile: EccBitCounts = EccBitCounts()
    aggregate: EccBitCounts = EccBitCounts()


class SramCounts(Model):
    correctable: NonNeg = 0
    uncorrectable_parity: NonNeg = 0
    uncorrectable_secded: NonNeg = 0


class SramSources(Model):
    l2: NonNeg = 0
    sm: NonNeg = 0
    microcontroller: NonNeg = 0
    pcie: NonNeg = 0
    other: NonNeg = 0


class Sram(Model):
    volatile: SramCounts = SramCounts()
    aggregate: SramCounts = SramCounts()
    uncorrectable_sources: SramSources = SramSources()
    threshold_exceeded: bool = False


class Ecc(Model):
    mode_current: Mode = "enabled"
    mode_pending: Mode = "enabled"
    default_mode: Mode = "enabled"
    errors: EccErrors = EccErrors()
    sram: Sram = Sram()


class RetiredPageList(Model):
    count: NonNeg = 0
    addresses: list[NonNeg] = []


class RetiredPages(Model):
    single_bit_retirement: RetiredPageList = RetiredPageList()
    double_bit_retirement: RetiredPageList = RetiredPageList()
    pending_blacklist: bool = False
    pending_retirement: bool = False


class RemapHistogram(Model):
    max: NonNeg = 0
    high: NonNeg = 0
    partial: NonNeg = 0
    low: NonNeg = 0
    none: NonNeg = 0


class RemappedRows(Model):
    correctable: NonNeg = 0
    uncorrectable: NonNeg = 0
    pending: bool = False
    failure_occurred: bool = False
    availability_histogram: RemapHistogram | None = None


class Display(Model):
    mode: Mode = "disabled"
    active: Mode = "disabled"


class MigGpuInstanceProfile(Model):
    """One row of ``nvidia-smi mig -lgip``: a GPU-instance profile of the board (MIG user guide, real boards)."""

    name: Annotated[str, Field(pattern=r"^[1-8]g\.[0-9]+gb(\+me)?$")]
    id: NonNeg
    nvml_profile: Annotated[int, Field(ge=0, le=9)]  # the NVML_GPU_INSTANCE_PROFILE_* index it answers
    slices: Annotated[int, Field(ge=1, le=8)]
    instances: Annotated[int, Field(ge=1, le=8)]
    memory_mb: Annotated[int, Field(ge=1)]
    multiprocessors: Annotated[int, Field(ge=1)]
    copy_engines: NonNeg = 0
    decoders: NonNeg = 0
    encoders: NonNeg = 0
    jpegs: NonNeg = 0
    ofas: NonNeg = 0
    placement_size: Annotated[int, Field(ge=1, le=8)]  # memory slices an instance occupies
    placements: list[Annotated[int, Field(ge=0, le=7)]]  # the memory-slice starts it may take


class Mig(Model):
    mode_current: Mode = "disabled"
    mode_pending: Mode = "disabled"
    max_gpu_instances: NonNeg = 0
    gpu_instance_profiles: list[MigGpuInstanceProfile] = Field(default_factory=list, max_length=16)


class CurrentPending(Model):
    current: str = ""
    pending: str = ""


class Accounting(Model):
    mode: Mode = "disabled"
    buffer_size: NonNeg = 4000


class Virtualization(Model):
    mode: Literal["none", "passthrough", "vgpu", "host_vgpu", "host_vsga"] = "none"
    host_vgpu_mode: str = ""


class GspFirmware(Model):
    mode: Mode = "enabled"
    version: str = ""


class Features(Model):
    transformer_engine: bool = False
    fp4_support: bool = False
    fp6_support: bool = False
    fp8_support: bool = False
    confidential_compute: bool = False
    nvlink_c2c: bool = False
    decompression_engine: bool = False
    fifth_gen_tensor_cores: bool = False


class GraceSuperchip(Model):
    enabled: bool = False
    cpu_cores: NonNeg = 0
    cpu_memory_gb: NonNeg = 0
    coherent_memory: bool = False


class Topology(Model):
    default_level: Literal["internal", "single", "multiple", "hostbridge", "node", "system"] = "single"


class Process(Model):
    pid: Annotated[int, Field(gt=0)]
    type: Literal["C", "G", "C+G", ""] = "C"
    name: str = ""
    used_memory_mib: NonNeg = 0
    sm_util: Annotated[int, Field(ge=0, le=100)] = 0
    mem_util: Annotated[int, Field(ge=0, le=100)] = 0
    enc_util: Annotated[int, Field(ge=0, le=100)] = 0
    dec_util: Annotated[int, Field(ge=0, le=100)] = 0


class TemperatureDynamics(Model):
    base_c: NonNeg = 0
    variance_c: NonNeg = 0
    ramp_c: NonNeg = 0
    ramp_period_sec: Annotated[int, Field(gt=0)] = 60


class PowerDynamics(Model):
    base_mw: NonNeg = 0
    variance_mw: NonNeg = 0


class UtilizationDynamics(Model):
    pattern: Literal["steady", "idle", "busy", "burst", ""] = "steady"
    gpu_min: Annotated[int, Field(ge=0, le=100)] = 0
    gpu_max: Annotated[int, Field(ge=0, le=100)] = 0
    memory_min: Annotated[int, Field(ge=0, le=100)] = 0
    memory_max: Annotated[int, Field(ge=0, le=100)] = 0
    burst_period_sec: Annotated[int, Field(gt=0)] = 30


class DynamicMetrics(Model):
    seed: int = 0
    temperature: TemperatureDynamics | None = None
    power: PowerDynamics | None = None
    utilization: UtilizationDynamics | None = None


class Gpm(Model):
    supported: bool | None = None
    pcie_tx_mib_per_sec: NonNeg = 2048
    pcie_rx_mib_per_sec: NonNeg = 2048


class XidSpec(Model):
    code: NonNeg = 0


FailureMode = Literal["healthy", "lost", "fallen_off_bus", "ecc_uncorrectable"]


class Failure(Model):
    mode: FailureMode = "healthy"
    probability: Annotated[float, Field(ge=0, le=1)] | None = None
    after_calls: NonNeg | None = None
    seed: int = 0
    xid: XidSpec | None = None


class XidEvent(Model):
    """One Xid event raised on a GPU; ``seq`` increases node-wide so each is delivered once."""

    code: Annotated[int, Field(gt=0)]
    seq: Annotated[int, Field(gt=0)]


class FabricHealth(Model):
    degraded_bandwidth: bool = False
    route_recovery: bool = False
    route_unhealthy: bool = False
    access_timeout_recovery: bool = False
    incorrect_configuration: Literal[
        "none", "not_supported", "incorrect_sysguid", "incorrect_chassis_sn", "no_partition",
        "insufficient_nvlinks", "incompatible_gpu_fw", "invalid_location", "gpu_state_invalid",
    ] = "none"


class Fabric(Model):
    cluster_uuid: str = "00000000-0000-0000-0000-000000000001"
    clique_id: NonNeg = 0
    state: Literal["auto", "completed", "not_started", "in_progress", "not_supported", ""] = "auto"
    health_summary: Literal["auto", "healthy", "unhealthy", "limited_capacity", "not_supported", ""] = "auto"
    health: FabricHealth = FabricHealth()
    health_mask: NonNeg | None = None


class NvlinkError(Model):
    """Injected NVLink errors, a clock per GPU: ``accrued[link]`` + ``rate`` x seconds since ``since_ms``.

    ``rate`` errors/s grow on each active link (or on ``links``) from ``since_ms`` (wall-clock ms; 0:
    from when the node came up) on top of ``accrued`` (errors per link index counted before it).
    ``nvml-mock-ctl nvlink-error`` sets all four; a profile sets the first two.
    """

    rate: Annotated[float, Field(ge=0, le=1e9)] = 0.0
    links: list[NonNeg] = []
    since_ms: NonNeg = 0
    accrued: list[NonNeg] = []


class Platform(Model):
    chassis_serial_number: str = ""
    slot_number: NonNeg = 0
    tray_index: NonNeg = 0
    host_id: NonNeg = 0
    peer_type: str = ""
    module_id: NonNeg = 0


class DeviceConfig(Model):
    """Every per-GPU key; all optional so the same model validates defaults, devices[] entries and overrides."""

    name: str | None = None
    brand: Brand | None = None
    serial: str | None = None
    board_part_number: str | None = None
    vbios_version: str | None = None
    architecture: Architecture | None = None
    compute_capability: ComputeCapability | None = None
    num_gpu_cores: NonNeg | None = None
    inforom: Inforom | None = None
    memory: Memory | None = None
    bar1_memory: Bar1Memory | None = None
    pci: Pci | None = None
    pcie: Pcie | None = None
    power: Power | None = None
    thermal: Thermal | None = None
    fan: Fan | None = None
    clocks: Clocks | None = None
    clocks_throttle_reasons: ThrottleReasons | None = None
    supported_clocks: SupportedClocks | None = None
    performance_state: PState | None = None
    utilization: Utilization | None = None
    encoder_stats: SessionStats | None = None
    fbc_stats: SessionStats | None = None
    ecc: Ecc | None = None
    retired_pages: RetiredPages | None = None
    remapped_rows: RemappedRows | None = None
    display: Display | None = None
    persistence_mode: Mode | None = None
    compute_mode: Literal["default", "exclusive_thread", "prohibited", "exclusive_process"] | None = None
    mig: Mig | None = None
    gpu_operation_mode: CurrentPending | None = None
    driver_model: CurrentPending | None = None
    accounting: Accounting | None = None
    virtualization: Virtualization | None = None
    gsp_firmware: GspFirmware | None = None
    features: Features | None = None
    grace_superchip: GraceSuperchip | None = None
    topology: Topology | None = None
    processes: list[Process] | None = None
    dynamic_metrics: DynamicMetrics | None = None
    gpm: Gpm | None = None
    failure: Failure | None = None
    xid_events: list[XidEvent] | None = None
    fabric: Fabric | None = None
    nvlink_error: NvlinkError | None = None
    platform: Platform | None = None


class DeviceEntry(DeviceConfig):
    index: NonNeg
    uuid: Annotated[str, Field(pattern=r"^GPU-[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}$")] | None = None
    minor_number: NonNeg | None = None
    grace_cpu_pair: NonNeg | None = None


class NvlinkSwitch(Model):
    bdf: str
    uuid: str = ""
    device_id: NonNeg = 0x22A3  # NVSwitch (Hopper generation) PCI device id
    numa_node: int | None = None
    pci_visible: bool = True  # baseboard / switch-tray NVSwitches are not host PCI functions

    @field_validator("bdf")
    @classmethod
    def _bdf(cls, value: str) -> str:
        if not BUS_ID_RE.match(value):
            raise ValueError(f"must look like DDDD:BB:DD.F, got {value!r}")
        return value.lower()


class NvlinkDefaults(Model):
    state: str = "active"
    duty_cycle: Annotated[float, Field(ge=0, le=1)] = 0.05
    counter_seed: NonNeg = 0
    error_rate: Annotated[float, Field(ge=0)] = 0.0


class NvlinkLink(Model):
    link: NonNeg
    state: str = ""
    remote_device_type: str = "GPU"
    remote_pci_bus_id: str = "n/a"
    remote_index: NonNeg | None = None


class DeviceLinks(Model):
    index: NonNeg
    links: list[NvlinkLink]


class Nvlink(Model):
    version: Annotated[int, Field(ge=1, le=6)] = 4
    links_per_gpu: Annotated[int, Field(ge=0, le=18)] = 0
    bandwidth_per_link_mbps: NonNeg = 0
    c2c_enabled: bool = False
    switches: list[NvlinkSwitch] = []
    defaults: NvlinkDefaults = NvlinkDefaults()
    device_links: list[DeviceLinks] = []
    links: list[NvlinkLink] = []


class RootComplex(Model):
    id: str
    numa_node: NonNeg = 0
    devices: list[str] = []
    cpu_affinity: str | None = None

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        if not ROOT_COMPLEX_RE.match(value):
            raise ValueError(f"must look like pciDDDD:BB (e.g. pci0000:80), got {value!r}")
        return value.lower()

    @field_validator("devices")
    @classmethod
    def _devices(cls, value: list[str]) -> list[str]:
        for bdf in value:
            if not BUS_ID_RE.match(bdf):
                raise ValueError(f"must look like DDDD:BB:DD.F, got {bdf!r}")
        return [bdf.lower() for bdf in value]

    @field_validator("cpu_affinity")
    @classmethod
    def _cpus(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^\d+(-\d+)?(,\d+(-\d+)?)*$", value):
            raise ValueError(f"must be a CPU list like 0-71 or 0,2,4, got {value!r}")
        return value


class PcieTopology(Model):
    root_complexes: list[RootComplex] = []
    cores_per_numa: Annotated[int, Field(gt=0)] = 64

    @model_validator(mode="after")
    def _unique(self) -> PcieTopology:
        seen: set[str] = set()
        owners: dict[str, str] = {}
        for rc in self.root_complexes:
            if rc.id in seen:
                raise ValueError(f"root complex {rc.id} is listed twice")
            seen.add(rc.id)
            for bdf in rc.devices:
                if bdf in owners:
                    raise ValueError(f"device {bdf} is in both {owners[bdf]} and {rc.id}")
                owners[bdf] = rc.id
        return self


class Infiniband(Model):
    enabled: bool = False
    hca_type: str = "MT4129"
    pci_device_id: NonNeg = 0x1021  # ConnectX-7
    fw_version: str = "28.39.2048"
    hw_rev: str = "0x0"
    board_id: str = "MT_0000000838"
    link_layer: Literal["InfiniBand", "Ethernet"] = "InfiniBand"
    rate_gbps: Literal[10, 25, 40, 56, 100, 200, 400, 800] = 400
    port_state: Literal["DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"] = "ACTIVE"
    phys_state: Literal["Disabled", "Polling", "Training", "LinkUp", "LinkErrorRecovery", "PhyTest"] = "LinkUp"
    hcas_per_gpu: NonNeg = 1
    hca_count: NonNeg = 0
    guid_prefix: str = "a088c20300ab"
    node_desc_template: str = "{node_name} mlx5_{idx}"

    @field_validator("guid_prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        digits = value.replace(":", "")
        if len(digits) < 8 or not re.fullmatch(r"[0-9a-fA-F]+", digits):
            raise ValueError(f"needs at least 8 hex digits, got {value!r}")
        return value


class Profile(Model):
    """A whole node type.  ``name`` and ``description`` are Mokka additions; the rest is the nvml-mock format."""

    version: str
    name: str | None = None
    description: str | None = None
    system: System
    device_defaults: DeviceConfig = DeviceConfig()
    devices: list[DeviceEntry] = []
    nvlink: Nvlink | None = None
    pcie_topology: PcieTopology | None = None
    infiniband: Infiniband | None = None
    dynamic_metrics_defaults: DynamicMetrics | None = None

    @field_validator("version", mode="before")
    @classmethod
    def _version(cls, value: object) -> object:
        if isinstance(value, (int, float)):
            return str(value)
        return value

    @field_validator("devices")
    @classmethod
    def _unique_indices(cls, devices: list[DeviceEntry]) -> list[DeviceEntry]:
        seen: set[int] = set()
        for device in devices:
            if device.index in seen:
                raise ValueError(f"device index {device.index} appears more than once")
            seen.add(device.index)
        return devices
