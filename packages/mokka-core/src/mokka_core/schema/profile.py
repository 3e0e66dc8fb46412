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
from typing import Annotated, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from . import clocks, units

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


#: the most GPUs a node has (the mock library's MK_MAX_DEVICES; tests/test_state_bounds.py checks they agree)
MAX_GPUS = 256
#: the highest CPU id + 1 a cpu list may name: what the mock library holds (the cpu_affinity size in
#: native/state-keys.toml; tests/test_state_bounds.py checks they agree). A board's lists are folded
#: onto the host's CPUs when rendered, so this bounds only what a profile may say.
MAX_CPUS = 1024
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    @model_validator(mode="after")
    def _no_control_characters(self) -> Self:
        """No string reaches a rendered file with a line break (it would add keys or end the file)."""
        for name, value in self.__dict__.items():
            for text in (value if isinstance(value, list) else [value]):
                if isinstance(text, str) and _CONTROL_RE.search(text):
                    raise ValueError(f"{name}: control characters are not allowed, got {text[:60]!r}")
        return self


class Dmi(Model):
    """The machine's SMBIOS identity as ``/sys/class/dmi/id`` shows it (a Mokka addition)."""

    sys_vendor: str = ""
    """System manufacturer (/sys/class/dmi/id/sys_vendor), e.g. NVIDIA."""
    product_name: str = ""
    """System product name, e.g. DGXH100 (GFD's nvidia.com/gpu.machine, NFD's system-dmiid.product_name)."""
    product_family: str = ""
    """System family."""
    product_version: str = ""
    """System version."""
    product_sku: str = ""
    """System SKU number."""
    board_vendor: str = ""
    """Baseboard manufacturer."""
    board_name: str = ""
    """Baseboard product name."""
    board_version: str = ""
    """Baseboard version."""
    chassis_vendor: str = ""
    """Chassis manufacturer."""
    chassis_type: Annotated[int, Field(ge=1, le=0x24)] = 23  # SMBIOS 7.4.1: 23 rack mount chassis, 1 other
    """SMBIOS chassis type code (7.4.1): 23 rack mount chassis, 1 other."""
    chassis_version: str = ""
    """Chassis version."""
    bios_vendor: str = ""
    """BIOS vendor."""
    bios_version: str = ""
    """BIOS version."""
    bios_date: str = ""  # MM/DD/YYYY, as the kernel prints it
    """BIOS release date, MM/DD/YYYY as the kernel prints it."""
    bios_release: str = ""
    """BIOS release (major.minor)."""


class GpuDirect(Model):
    """The GPUDirect kernel modules the node loads beside the driver (a Mokka addition), as lsmod and /sys/module
    show them and the GPU Operator's validator checks them."""

    rdma: bool = False
    """nvidia_peermem (GPUDirect RDMA; loaded only where the node has HCAs: ib_core holds it)."""
    storage: bool = False
    """nvidia_fs (GPUDirect Storage)."""
    gdrcopy: bool = False
    """gdrdrv (GDRCopy)."""


class System(Model):
    driver_version: Annotated[str, Field(pattern=r"^\d+\.\d+(\.\d+)?$")]
    """Driver version the node reports (nvidia-smi, /proc/driver/nvidia/version), e.g. 550.163.01."""
    nvml_version: str | None = None
    """NVML library version (nvmlSystemGetNVMLVersion); default: 12.<driver_version>."""
    cuda_version: str | None = None
    """CUDA version as text (nvml-mock profiles carry it), e.g. 12.4: sets cuda_version_major/minor where not given."""
    cuda_version_major: NonNeg = 12
    """Major CUDA driver API version (nvmlSystemGetCudaDriverVersion)."""
    cuda_version_minor: NonNeg = 4
    """Minor CUDA driver API version."""
    num_devices: Annotated[int, Field(ge=1, le=MAX_GPUS)] | None = None
    """Number of GPUs; default: the number of devices[] entries (--gpus overrides)."""
    dmi: Dmi | None = None
    """The machine's SMBIOS identity as /sys/class/dmi/id shows it (a Mokka addition); none: no DMI staged."""
    memory_bytes: Annotated[int, Field(gt=0)] = 64 << 30
    """Host memory of the board, split evenly over its NUMA nodes (node<N>/meminfo; a Mokka addition). Unit: bytes."""
    nvidia_smi: Annotated[str, Field(pattern=r"^/")] | None = None
    """An nvidia-smi binary (absolute path) staged at /usr/bin/nvidia-smi instead of Debian's of the branch
    nearest driver_version."""
    gpudirect: GpuDirect = GpuDirect()
    """The GPUDirect modules loaded beside the driver (a Mokka addition; none by default)."""

    @model_validator(mode="before")
    @classmethod
    def _cuda_parts(cls, data: object) -> object:
        if not isinstance(data, dict) or data.get("cuda_version") is None:
            return data
        text = data["cuda_version"]
        parts = re.fullmatch(r"(\d+)\.(\d+)", str(text))
        if parts is None:
            raise ValueError(f"cuda_version must look like 12.4, got {text!r}")
        given = {"cuda_version_major": int(parts[1]), "cuda_version_minor": int(parts[2])}
        for key, value in given.items():
            if key in data and data[key] != value:
                raise ValueError(f"cuda_version {text} disagrees with {key} {data[key]!r}")
        return {**given, **data}


class ComputeCapability(Model):
    major: NonNeg
    """CUDA compute capability, major (9 for Hopper)."""
    minor: NonNeg
    """CUDA compute capability, minor."""


class Inforom(Model):
    image_version: str = ""
    """InfoROM image version (nvidia-smi -q: Image Version)."""
    oem_object: str = ""
    """InfoROM OEM object version."""
    ecc_object: str = ""
    """InfoROM ECC object version."""
    pwr_object: str = ""
    """InfoROM power object version."""
    bbx_flush_duration_us: NonNeg | None = None
    """How long the last flush of the InfoROM black box (BBX) took in this run (nvidia-smi -q: Inforom BBX
    Object Flush, Latest Duration; its timestamp is when the node came up); null: not flushed yet (N/A). Unit: µs."""


class Memory(Model):
    total_bytes: Annotated[int, Field(gt=0)]
    """Frame-buffer memory size. Unit: bytes; also 80GiB, 81559MiB."""
    reserved_bytes: NonNeg = 0
    """Memory the driver reserves for itself. Unit: bytes; also 80GiB, 81559MiB."""
    free_bytes: NonNeg | None = None
    """Free memory; default: total - reserved - used. Unit: bytes; also 80GiB, 81559MiB."""
    used_bytes: NonNeg | None = None
    """Used memory; default: total - reserved - free where free is given, else 0. Unit: bytes; also 80GiB, 81559MiB."""
    memory_bus_width: NonNeg = 0
    """Memory bus width. Unit: bits."""

    @field_validator("total_bytes", mode="before",
                     json_schema_input_type=Annotated[int, Field(gt=0)] | str)
    @classmethod
    def _total_bytes(cls, value: object) -> object:
        return units.byte_count(value)

    @field_validator("reserved_bytes", mode="before",
                     json_schema_input_type=NonNeg | str)
    @classmethod
    def _reserved_bytes(cls, value: object) -> object:
        return units.byte_count(value)

    @field_validator("free_bytes", "used_bytes", mode="before",
                     json_schema_input_type=NonNeg | None | str)
    @classmethod
    def _free_used_bytes(cls, value: object) -> object:
        return units.byte_count(value)

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
    """BAR1 aperture size. Unit: bytes; also 80GiB, 81559MiB."""
    free_bytes: NonNeg | None = None
    """Free BAR1 memory; default: total - used. Unit: bytes; also 80GiB, 81559MiB."""
    used_bytes: NonNeg | None = None
    """Used BAR1 memory. Unit: bytes; also 80GiB, 81559MiB."""

    @field_validator("total_bytes", mode="before",
                     json_schema_input_type=Annotated[int, Field(gt=0)] | str)
    @classmethod
    def _total_bytes(cls, value: object) -> object:
        return units.byte_count(value)

    @field_validator("free_bytes", "used_bytes", mode="before",
                     json_schema_input_type=NonNeg | None | str)
    @classmethod
    def _free_used_bytes(cls, value: object) -> object:
        return units.byte_count(value)


class Pci(Model):
    device_id: NonNeg | None = None
    """PCI device and vendor id as NVML has it (device << 16 | vendor): 0x233010de, or 10de:2330 as in lspci -nn."""
    subsystem_id: NonNeg | None = None
    """PCI subsystem id as NVML has it (subsystem device << 16 | vendor): 0x16c110de, or 10de:16c1."""
    bus_id: str | None = None
    """PCI address DDDD:BB:DD.F; default: derived from the index (devices[] only)."""
    revision: NonNeg = 0xA1
    """PCI revision id (sysfs revision, config space byte 8)."""

    @field_validator("device_id", mode="before",
                     json_schema_input_type=NonNeg | None | str)
    @classmethod
    def _device_id(cls, value: object) -> object:
        return units.pci_id(units.NVIDIA, combined=True)(value)

    @field_validator("subsystem_id", mode="before",
                     json_schema_input_type=NonNeg | None | str)
    @classmethod
    def _subsystem_id(cls, value: object) -> object:
        return units.pci_id(None, combined=True)(value)

    @field_validator("bus_id")
    @classmethod
    def _bus_id(cls, value: str | None) -> str | None:
        if value is not None and not BUS_ID_RE.match(value):
            raise ValueError(f"must look like DDDD:BB:DD.F (e.g. 0000:1a:00.0), got {value!r}")
        return value.lower() if value else value


PcieAtomic = Literal["fetchadd_32", "fetchadd_64", "swap_32", "swap_64", "cas_32", "cas_64"]


class Pcie(Model):
    max_link_gen: Annotated[int, Field(ge=1, le=6)] | None = None
    """Maximum PCIe generation of the link (1-6)."""
    current_link_gen: Annotated[int, Field(ge=1, le=6)] | None = None
    """Current PCIe generation (1-6); default: the maximum."""
    max_link_width: Annotated[int, Field(ge=1, le=32)] | None = None
    """Maximum PCIe link width (lanes, 1-32)."""
    current_link_width: Annotated[int, Field(ge=1, le=32)] | None = None
    """Current PCIe link width (lanes); default: the maximum."""
    gpu_max_link_gen: Annotated[int, Field(ge=1, le=6)] | None = None
    """Maximum PCIe generation the GPU itself supports (nvidia-smi's Device Max); default: max_link_gen."""
    max_host_link_gen: Annotated[int, Field(ge=1, le=6)] | Literal["N/A"] | None = None
    """Maximum PCIe generation of the host side of the link (nvidia-smi's Host Max; 1-6, or N/A: not reported,
    as in a VM the GPU is passed through to); default: max_link_gen."""
    atomic_caps_outbound: list[PcieAtomic] = []
    """PCIe atomic operations the GPU can issue (nvidia-smi's Atomic Caps Outbound); empty: N/A."""
    atomic_caps_inbound: list[PcieAtomic] = []
    """PCIe atomic operations the GPU completes (nvidia-smi's Atomic Caps Inbound); empty: N/A."""
    replay_counter: NonNeg = 0
    """PCIe replay counter (nvmlDeviceGetPcieReplayCounter)."""
    tx_throughput_kbps: NonNeg = 0
    """PCIe transmit throughput. Unit: KB/s."""
    rx_throughput_kbps: NonNeg = 0
    """PCIe receive throughput. Unit: KB/s."""


class ModulePowerLimits(Model):
    """Power limits of the whole module (GPU and its Grace CPU on a superchip: nvidia-smi's Module Power Readings)."""

    default_limit_mw: NonNeg
    """Default module power limit. Unit: mW; also 2500W."""
    enforced_limit_mw: NonNeg | None = None
    """Enforced module power limit; default: the default limit. Unit: mW; also 2500W."""
    min_limit_mw: NonNeg = 0
    """Lowest module power limit that can be set. Unit: mW; also 500W."""
    max_limit_mw: NonNeg | None = None
    """Highest module power limit that can be set; default: the default limit. Unit: mW; also 2500W."""

    @field_validator("default_limit_mw", "min_limit_mw", mode="before", json_schema_input_type=NonNeg | str)
    @classmethod
    def _milliwatts(cls, value: object) -> object:
        return units.milliwatts(value)

    @field_validator("enforced_limit_mw", "max_limit_mw", mode="before", json_schema_input_type=NonNeg | None | str)
    @classmethod
    def _optional_milliwatts(cls, value: object) -> object:
        return units.milliwatts(value)


class Power(Model):
    management_supported: bool = True
    """Whether power readings and limits are supported (false: nvidia-smi shows N/A)."""
    management_mode: Mode = "enabled"
    """Power management mode."""
    default_limit_mw: NonNeg
    """Default power limit (700000 for H100 SXM5). Unit: mW; also 700W, 450.5W."""
    enforced_limit_mw: NonNeg | None = None
    """Enforced power limit; default: the default limit. Unit: mW; also 700W, 450.5W."""
    min_limit_mw: NonNeg = 0
    """Lowest power limit that can be set. Unit: mW; also 700W, 450.5W."""
    max_limit_mw: NonNeg | None = None
    """Highest power limit that can be set; default: the default limit. Unit: mW; also 700W, 450.5W."""
    current_draw_mw: NonNeg = 0
    """Power draw (nvmlDeviceGetPowerUsage); nvml-mock-ctl power sets it. Unit: mW; also 700W, 450.5W."""
    power_state: str | None = None
    """Refused (an error): the power state is the P-state; set performance_state instead."""
    total_energy_consumption_mj: NonNeg = 0
    """Energy consumed since the driver loaded (nvmlDeviceGetTotalEnergyConsumption). Unit: mJ."""
    module: ModulePowerLimits | None = None
    """Limits of the whole module (superchips: GB200, GB300); unset: N/A."""

    @field_validator("default_limit_mw", "min_limit_mw", "current_draw_mw", mode="before",
                     json_schema_input_type=NonNeg | str)
    @classmethod
    def _milliwatts(cls, value: object) -> object:
        return units.milliwatts(value)

    @field_validator("enforced_limit_mw", "max_limit_mw", mode="before",
                     json_schema_input_type=NonNeg | None | str)
    @classmethod
    def _optional_milliwatts(cls, value: object) -> object:
        return units.milliwatts(value)

    @field_validator("power_state", mode="before")
    @classmethod
    def _refused(cls, value: object) -> object:
        if value is not None:
            raise ValueError("refused: the power state is the P-state; set performance_state instead (drop the key)")
        return value

    @model_validator(mode="after")
    def _limits(self) -> Power:
        top = self.max_limit_mw if self.max_limit_mw is not None else self.default_limit_mw
        if self.min_limit_mw > top:
            raise ValueError(f"min_limit_mw ({self.min_limit_mw}) exceeds max_limit_mw ({top})")
        return self


class TLimitThresholds(Model):
    """nvidia-smi's "GPU T.Limit" thresholds (fields 193-196): degrees relative to the T.Limit reference."""

    shutdown_c: int
    """GPU Shutdown T.Limit Temp. Unit: °C."""
    slowdown_c: int
    """GPU Slowdown T.Limit Temp. Unit: °C."""
    gpu_max_c: int = 0
    """GPU Max Operating T.Limit Temp. Unit: °C."""
    memory_max_c: int = 0
    """Memory Max Operating T.Limit Temp (HBM boards). Unit: °C."""
    limit_c: NonNeg | None = None
    """The temperature "GPU T.Limit Temp" counts down to: it reads this minus the GPU temperature
    (nvmlDeviceGetMarginTemperature; a capture's gpu_temp plus gpu_temp_tlimit). Default: the slowdown
    threshold. Unit: °C."""


class Thermal(Model):
    temperature_gpu_c: Annotated[int, Field(ge=0, le=200)]
    """GPU core temperature (0-200); nvml-mock-ctl temp sets it. Unit: °C."""
    temperature_memory_c: Annotated[int, Field(ge=0, le=200)] = 0
    """HBM memory temperature (0: not reported). Unit: °C."""
    shutdown_threshold_c: NonNeg = 0
    """Temperature at which the GPU shuts down. Unit: °C."""
    slowdown_threshold_c: NonNeg = 0
    """Temperature at which the GPU slows down (HW thermal slowdown). Unit: °C."""
    max_operating_c: NonNeg = 0
    """Maximum operating temperature (GPU Max Operating Temp). Unit: °C."""
    target_temperature_c: NonNeg = 0
    """Target temperature of the thermal controller (GPU Target Temperature). Unit: °C."""
    tlimit: TLimitThresholds | None = None
    """Thresholds on the T.Limit scale (T.Limit boards: Hopper, Ada and newer); default: each absolute threshold
    relative to the slowdown threshold."""


class Fan(Model):
    count: NonNeg = 0
    """Number of fans (0 for passively cooled data-centre boards)."""
    speed_percent: Annotated[int, Field(ge=0, le=100)] | Literal["N/A"] = "N/A"
    """Fan speed, 0-100, or N/A (no fan). Unit: %."""
    target_speed_percent: Annotated[int, Field(ge=0, le=100)] | None = None
    """Speed the fan control aims at, 0-100 (nvmlDeviceGetTargetFanSpeed); unset: the fan speed. Unit: %."""

    @field_validator("speed_percent", mode="before")
    @classmethod
    def _numeric_string(cls, value: object) -> object:
        if isinstance(value, str) and value.isdigit():
            return int(value)
        return value


class Clocks(Model):
    graphics_current: NonNeg = 0
    """Current graphics clock. Unit: MHz; also 1980MHz, 1.98GHz."""
    graphics_max: NonNeg = 0
    """Maximum graphics clock (the ceiling for nvml-mock-ctl clocks). Unit: MHz; also 1980MHz, 1.98GHz."""
    graphics_app: NonNeg = 0
    """Application graphics clock. Unit: MHz; also 1980MHz, 1.98GHz."""
    graphics_app_default: NonNeg = 0
    """Default application graphics clock. Unit: MHz; also 1980MHz, 1.98GHz."""
    sm_current: NonNeg = 0
    """Current SM clock. Unit: MHz; also 1980MHz, 1.98GHz."""
    sm_max: NonNeg = 0
    """Maximum SM clock. Unit: MHz; also 1980MHz, 1.98GHz."""
    memory_current: NonNeg = 0
    """Current memory clock. Unit: MHz; also 1980MHz, 1.98GHz."""
    memory_max: NonNeg = 0
    """Maximum memory clock. Unit: MHz; also 1980MHz, 1.98GHz."""
    memory_app: NonNeg = 0
    """Application memory clock. Unit: MHz; also 1980MHz, 1.98GHz."""
    memory_app_default: NonNeg = 0
    """Default application memory clock. Unit: MHz; also 1980MHz, 1.98GHz."""
    video_current: NonNeg = 0
    """Current video clock. Unit: MHz; also 1980MHz, 1.98GHz."""
    video_max: NonNeg = 0
    """Maximum video clock. Unit: MHz; also 1980MHz, 1.98GHz."""

    @field_validator("graphics_current", "graphics_max", "graphics_app", "graphics_app_default", "sm_current",
                     "sm_max", "memory_current", "memory_max", "memory_app", "memory_app_default", "video_current",
                     "video_max", mode="before", json_schema_input_type=NonNeg | str)
    @classmethod
    def _megahertz(cls, value: object) -> object:
        return units.megahertz(value)


class ThrottleCounters(Model):
    sw_power_cap_us: NonNeg = 0
    """Time spent throttled by the software power cap. Unit: µs."""
    sync_boost_us: NonNeg = 0
    """Time spent throttled by sync boost. Unit: µs."""
    sw_thermal_slowdown_us: NonNeg = 0
    """Time spent in software thermal slowdown. Unit: µs."""
    hw_thermal_slowdown_us: NonNeg = 0
    """Time spent in hardware thermal slowdown. Unit: µs."""
    hw_power_brake_slowdown_us: NonNeg = 0
    """Time spent in hardware power-brake slowdown. Unit: µs."""


class ThrottleReasons(Model):
    gpu_idle: bool = False
    """Clocks are low because the GPU is idle."""
    applications_clocks_setting: bool = False
    """Clocks are limited by the application clock setting."""
    sw_power_cap: bool = False
    """Clocks are limited by the software power cap."""
    hw_slowdown: bool = False
    """Hardware slowdown (thermal or power brake) is active."""
    hw_thermal_slowdown: bool = False
    """Hardware thermal slowdown is active."""
    hw_power_brake_slowdown: bool = False
    """Hardware power-brake slowdown is active."""
    sync_boost: bool = False
    """Clocks are limited by sync boost."""
    sw_thermal_slowdown: bool = False
    """Software thermal slowdown is active."""
    display_clocks_setting: bool = False
    """Clocks are limited by the display clock setting."""
    counters: ThrottleCounters = ThrottleCounters()
    """Accumulated time per throttle reason (nvmlDeviceGetFieldValues' violation counters)."""


class SupportedMemoryClock(Model):
    freq_mhz: NonNeg
    """A supported memory clock (nvmlDeviceGetSupportedMemoryClocks). Unit: MHz; also 1980MHz, 1.98GHz."""
    graphics_clocks: list[NonNeg] = []
    """Graphics clocks supported with this memory clock, highest first, in equal steps from the lowest (fractional
    steps rounded down to the MHz, as Blackwell's 7.5 MHz: 2062, 2055, 2047). Unit: MHz."""

    @field_validator("freq_mhz", mode="before",
                     json_schema_input_type=NonNeg | str)
    @classmethod
    def _megahertz(cls, value: object) -> object:
        return units.megahertz(value)

    @field_validator("graphics_clocks")
    @classmethod
    def _a_ladder(cls, value: list[int]) -> list[int]:
        if clocks.ladder(tuple(value)) is None:
            raise ValueError("graphics clocks are listed highest first, in equal steps down to the lowest")
        return value


class SupportedClocks(Model):
    memory_clocks: Annotated[list[SupportedMemoryClock], Field(max_length=4)] = []
    """Supported memory clocks (at most 4), each with its graphics clocks; none: the maximum memory clock, with the
    graphics clocks from the maximum down to the default application clock in 15 MHz steps."""


class Utilization(Model):
    gpu: Annotated[int, Field(ge=0, le=100)] = 0
    """GPU utilization, 0-100; nvml-mock-ctl util sets it. Unit: %."""
    memory: Annotated[int, Field(ge=0, le=100)] = 0
    """Memory controller utilization, 0-100. Unit: %."""
    encoder: Annotated[int, Field(ge=0, le=100)] = 0
    """Video encoder utilization, 0-100. Unit: %."""
    decoder: Annotated[int, Field(ge=0, le=100)] = 0
    """Video decoder utilization, 0-100. Unit: %."""
    jpeg: Annotated[int, Field(ge=0, le=100)] = 0
    """JPEG engine utilization, 0-100. Unit: %."""
    ofa: Annotated[int, Field(ge=0, le=100)] = 0
    """Optical-flow accelerator utilization, 0-100. Unit: %."""


class SessionStats(Model):
    session_count: NonNeg = 0
    """Number of active sessions."""
    average_fps: NonNeg = 0
    """Average frames per second over the sessions. Unit: fps."""
    average_latency_us: NonNeg = 0
    """Average latency over the sessions. Unit: µs."""


class EccLocations(Model):
    device_memory: NonNeg = 0
    """Errors in device (DRAM) memory."""
    l1_cache: NonNeg = 0
    """Errors in the L1 caches."""
    l2_cache: NonNeg = 0
    """Errors in the L2 cache."""
    register_file: NonNeg = 0
    """Errors in the register files."""
    texture_memory: NonNeg = 0
    """Errors in texture memory."""
    total: NonNeg = 0
    """Total errors; default: the sum of the locations."""


class EccBitCounts(Model):
    single_bit: EccLocations = EccLocations()
    """Single-bit (corrected) errors by location."""
    double_bit: EccLocations = EccLocations()
    """Double-bit (uncorrected) errors by location."""


class EccErrors(Model):
    volatile: EccBitCounts = EccBitCounts()
    """Counts since the last driver load or reset."""
    aggregate: EccBitCounts = EccBitCounts()
    """Lifetime counts (kept in the InfoROM)."""


class SramCounts(Model):
    correctable: NonNeg = 0
    """Corrected SRAM errors."""
    uncorrectable_parity: NonNeg = 0
    """Uncorrected SRAM errors detected by parity."""
    uncorrectable_secded: NonNeg = 0
    """Uncorrected SRAM errors detected by SEC-DED."""


class SramSources(Model):
    l2: NonNeg = 0
    """Uncorrectable SRAM errors in the L2 cache."""
    sm: NonNeg = 0
    """Uncorrectable SRAM errors in the SMs."""
    microcontroller: NonNeg = 0
    """Uncorrectable SRAM errors in microcontrollers."""
    pcie: NonNeg = 0
    """Uncorrectable SRAM errors in the PCIe unit."""
    other: NonNeg = 0
    """Uncorrectable SRAM errors elsewhere."""


class Sram(Model):
    volatile: SramCounts = SramCounts()
    """SRAM error counts since the last driver load or reset."""
    aggregate: SramCounts = SramCounts()
    """Lifetime SRAM error counts."""
    uncorrectable_sources: SramSources = SramSources()
    """Where the aggregate uncorrectable SRAM errors happened."""
    threshold_exceeded: bool = False
    """The SRAM error threshold was exceeded (the GPU needs service)."""


class Ecc(Model):
    mode_current: Mode = "enabled"
    """ECC mode now."""
    mode_pending: Mode = "enabled"
    """ECC mode after the next reset."""
    default_mode: Mode = "enabled"
    """ECC mode as shipped."""
    errors: EccErrors = EccErrors()
    """ECC error counts in device memory and caches; nvml-mock-ctl ecc sets them."""
    sram: Sram = Sram()
    """SRAM ECC error counts (Hopper and later)."""


class RetiredPageList(Model):
    count: NonNeg = 0
    """Number of retired pages; default: the number of addresses."""
    addresses: list[NonNeg] = []
    """Physical addresses of the retired pages."""


class RetiredPages(Model):
    single_bit_retirement: RetiredPageList = RetiredPageList()
    """Pages retired for multiple single-bit errors."""
    double_bit_retirement: RetiredPageList = RetiredPageList()
    """Pages retired for a double-bit error."""
    pending_blacklist: bool = False
    """A page is waiting to be blacklisted."""
    pending_retirement: bool = False
    """A page retirement is pending (needs a reset)."""


class RemapHistogram(Model):
    max: NonNeg = 0
    """Banks with all spare rows available."""
    high: NonNeg = 0
    """Banks with many spare rows available."""
    partial: NonNeg = 0
    """Banks with some spare rows available."""
    low: NonNeg = 0
    """Banks with few spare rows available."""
    none: NonNeg = 0
    """Banks with no spare rows available."""


class RemappedRows(Model):
    correctable: NonNeg = 0
    """Rows remapped for correctable errors; nvml-mock-ctl remapped-rows sets the four counts and flags."""
    uncorrectable: NonNeg = 0
    """Rows remapped for uncorrectable errors."""
    pending: bool = False
    """A remap is pending (the GPU needs a reset)."""
    failure_occurred: bool = False
    """A remap failed."""
    availability_histogram: RemapHistogram | None = None
    """Spare-row availability per bank (nvmlDeviceGetRowRemapperHistogram)."""


class Display(Model):
    mode: Mode = "disabled"
    """Whether a display can be attached."""
    active: Mode = "disabled"
    """Whether a display is initialised."""


class MigGpuInstanceProfile(Model):
    """One row of ``nvidia-smi mig -lgip``: a GPU-instance profile of the board (MIG user guide, real boards)."""

    name: Annotated[str, Field(pattern=r"^[1-8]g\.[0-9]+gb(\+me)?$")]
    """Profile name, e.g. 3g.40gb (1g.10gb+me: with the media extensions)."""
    id: NonNeg
    """Profile id nvidia-smi shows and -cgi takes (9 for H100's 3g.40gb)."""
    nvml_profile: Annotated[int, Field(ge=0, le=9)]  # the NVML_GPU_INSTANCE_PROFILE_* index it answers
    """The NVML_GPU_INSTANCE_PROFILE_* index it answers to."""
    slices: Annotated[int, Field(ge=1, le=8)]
    """Compute slices (the Ng of the name)."""
    instances: Annotated[int, Field(ge=1, le=8)]
    """How many instances of it fit on an empty GPU."""
    memory_mb: Annotated[int, Field(ge=1)]
    """Memory of an instance. Unit: MiB."""
    multiprocessors: Annotated[int, Field(ge=1)]
    """SMs of an instance."""
    copy_engines: NonNeg = 0
    """Copy engines of an instance."""
    decoders: NonNeg = 0
    """Video decoders of an instance."""
    encoders: NonNeg = 0
    """Video encoders of an instance."""
    jpegs: NonNeg = 0
    """JPEG decoders of an instance."""
    ofas: NonNeg = 0
    """Optical-flow accelerators of an instance."""
    placement_size: Annotated[int, Field(ge=1, le=8)]  # memory slices an instance occupies
    """Memory slices an instance occupies."""
    placements: list[Annotated[int, Field(ge=0, le=7)]]  # the memory-slice starts it may take
    """The memory-slice starts an instance may take (nvidia-smi mig -lgipp)."""


class Mig(Model):
    mode_current: Mode = "disabled"
    """MIG mode now."""
    mode_pending: Mode = "disabled"
    """MIG mode after the next reset."""
    max_gpu_instances: NonNeg = 0
    """How many GPU instances MIG can make (7 on A100/H100; 0: no MIG)."""
    gpu_instance_profiles: list[MigGpuInstanceProfile] = Field(default_factory=list, max_length=16)
    """The board's GPU-instance profiles as nvidia-smi mig -lgip lists them (MIG-capable boards)."""
    layout: list[str] = Field(default_factory=list, max_length=8)
    """GPU instances the GPU comes up with, by profile name (e.g. [3g.40gb, 3g.40gb]), each with its
    default compute instance, as `nvidia-smi mig -cgi 9,9 -C` makes them. Needs mode_current enabled."""

    @model_validator(mode="after")
    def _layout_fits(self) -> Mig:
        """What can be told without placing: the names, the mode, the board's slices and instance counts.
        Placement is the NVML library's (native/src/mig.c), which makes the layout when the node is staged."""
        if not self.layout:
            return self
        by_name = {profile.name: profile for profile in self.gpu_instance_profiles}
        if not by_name:
            raise ValueError("layout: this board has no MIG (no gpu_instance_profiles)")
        if self.mode_current != "enabled":
            raise ValueError(f"layout: needs mode_current enabled (MIG on), got {self.mode_current}")
        unknown = [name for name in self.layout if name not in by_name]
        if unknown:
            raise ValueError(f"layout: unknown GPU-instance profile {unknown[0]!r}; the board has {', '.join(by_name)}")
        chosen = [by_name[name] for name in self.layout]
        for profile in chosen:
            if self.layout.count(profile.name) > profile.instances:
                raise ValueError(f"layout: {self.layout.count(profile.name)} x {profile.name}, "
                                 f"the board makes at most {profile.instances}")
        if sum(p.slices for p in chosen) > 7 or sum(p.placement_size for p in chosen) > 8:
            raise ValueError(f"layout: {', '.join(self.layout)} needs more than the GPU's 7 compute and "
                             "8 memory slices")
        if len(chosen) > self.max_gpu_instances:
            raise ValueError(f"layout: {len(chosen)} GPU instances, the board makes at most {self.max_gpu_instances}")
        return self


class CurrentPending(Model):
    current: str = ""
    """The value now."""
    pending: str = ""
    """The value after the next reset."""


GomName = Literal["all_on", "compute", "low_dp"]


class GpuOperationMode(Model):
    current: GomName | None = None
    """The mode now: all_on, compute (no graphics), low_dp (low double precision); unset: the board has none (N/A)."""
    pending: GomName | None = None
    """The mode after the next GPU reset (nvmlDeviceSetGpuOperationMode sets it); unset: the current one."""


class Accounting(Model):
    mode: Mode = "disabled"
    """Whether per-process accounting is on."""
    buffer_size: NonNeg = 4000
    """Number of processes the accounting buffer keeps."""


class Virtualization(Model):
    mode: Literal["none", "passthrough", "vgpu", "host_vgpu", "host_vsga"] = "none"
    """GPU virtualization mode (nvmlDeviceGetVirtualizationMode)."""
    host_vgpu_mode: str = ""
    """Host vGPU mode as text (empty: not reported)."""


class GspFirmware(Model):
    mode: Mode = "enabled"
    """Whether the GPU System Processor firmware is in use."""
    version: str = ""
    """GSP firmware version (nvidia-smi's GSP Firmware Version)."""


#: feature flags of nvml-mock profiles that Mokka refuses, and why: no NVML call or file shows them
_BY_ARCH = "no NVML call shows it; consumers derive it from the architecture (nvmlDeviceGetArchitecture)"
_BY_CC = "no NVML call shows it; consumers derive it from the compute capability (nvmlDeviceGetCudaComputeCapability)"
REFUSED_FEATURES = {
    "transformer_engine": _BY_ARCH,
    "fp4_support": _BY_CC,
    "fp6_support": _BY_CC,
    "fp8_support": _BY_CC,
    "decompression_engine": _BY_ARCH,
    "fifth_gen_tensor_cores": _BY_ARCH,
    "nvlink_c2c": "the C2C mode (nvmlDeviceGetC2cModeInfoV) follows nvlink.c2c_enabled; set that instead",
}


class Features(Model):
    confidential_compute: bool = False
    """The GPU supports confidential computing (nvmlSystemGetConfComputeCapabilities reports the GPUs capable
    when every GPU does; CC mode itself stays off)."""
    transformer_engine: bool | None = None
    """Refused (an error): no NVML call shows it; consumers derive it from the architecture."""
    fp4_support: bool | None = None
    """Refused (an error): no NVML call shows it; consumers derive it from the compute capability."""
    fp6_support: bool | None = None
    """Refused (an error): no NVML call shows it; consumers derive it from the compute capability."""
    fp8_support: bool | None = None
    """Refused (an error): no NVML call shows it; consumers derive it from the compute capability."""
    nvlink_c2c: bool | None = None
    """Refused (an error): the C2C mode follows nvlink.c2c_enabled; set that instead."""
    decompression_engine: bool | None = None
    """Refused (an error): no NVML call shows it; consumers derive it from the architecture."""
    fifth_gen_tensor_cores: bool | None = None
    """Refused (an error): no NVML call shows it; consumers derive it from the architecture."""

    @field_validator(*REFUSED_FEATURES, mode="before")
    @classmethod
    def _refused(cls, value: object, info: ValidationInfo) -> object:
        if value is not None:
            raise ValueError(f"refused: {REFUSED_FEATURES[info.field_name or '']} (drop the key)")
        return value


class GraceSuperchip(Model):
    enabled: bool = False
    """The GPU is half of a Grace superchip (GH200, GB200)."""
    cpu_cores: NonNeg = 0
    """Cores of the paired Grace CPU."""
    cpu_memory_gb: NonNeg = 0
    """LPDDR memory of the paired Grace CPU. Unit: GB."""
    coherent_memory: bool = False
    """CPU and GPU memory are coherent over NVLink-C2C."""


class Topology(Model):
    default_level: Literal["internal", "single", "multiple", "hostbridge", "node", "system"] = "single"
    """PCIe topology level between GPUs where the profile gives no root complexes (nvidia-smi topo -m)."""


class Process(Model):
    pid: Annotated[int, Field(gt=0)]
    """Process id the driver reports (need not exist on the host)."""
    type: Literal["C", "G", "C+G", ""] = "C"
    """C compute, G graphics, C+G both."""
    name: str = ""
    """Process name (nvidia-smi's process list)."""
    used_memory_mib: NonNeg = 0
    """GPU memory the process uses. Unit: MiB."""
    sm_util: Annotated[int, Field(ge=0, le=100)] = 0
    """SM utilization of the process, 0-100. Unit: %."""
    mem_util: Annotated[int, Field(ge=0, le=100)] = 0
    """Memory utilization of the process, 0-100. Unit: %."""
    enc_util: Annotated[int, Field(ge=0, le=100)] = 0
    """Encoder utilization of the process, 0-100. Unit: %."""
    dec_util: Annotated[int, Field(ge=0, le=100)] = 0
    """Decoder utilization of the process, 0-100. Unit: %."""


class TemperatureDynamics(Model):
    base_c: NonNeg = 0
    """Temperature the wave is centred on. Unit: °C."""
    variance_c: NonNeg = 0
    """Random spread around the base. Unit: °C."""
    ramp_c: NonNeg = 0
    """Amplitude of the slow ramp. Unit: °C."""
    ramp_period_sec: Annotated[int, Field(gt=0)] = 60
    """Period of the ramp. Unit: s."""


class PowerDynamics(Model):
    base_mw: NonNeg = 0
    """Power draw the values vary around. Unit: mW; also 700W, 450.5W."""
    variance_mw: NonNeg = 0
    """Random spread around the base. Unit: mW; also 700W, 450.5W."""

    @field_validator("base_mw", "variance_mw", mode="before",
                     json_schema_input_type=NonNeg | str)
    @classmethod
    def _milliwatts(cls, value: object) -> object:
        return units.milliwatts(value)


class UtilizationDynamics(Model):
    pattern: Literal["steady", "idle", "busy", "burst", ""] = "steady"
    """Shape of the utilization over time."""
    gpu_min: Annotated[int, Field(ge=0, le=100)] = 0
    """Lowest GPU utilization. Unit: %."""
    gpu_max: Annotated[int, Field(ge=0, le=100)] = 0
    """Highest GPU utilization. Unit: %."""
    memory_min: Annotated[int, Field(ge=0, le=100)] = 0
    """Lowest memory utilization. Unit: %."""
    memory_max: Annotated[int, Field(ge=0, le=100)] = 0
    """Highest memory utilization. Unit: %."""
    burst_period_sec: Annotated[int, Field(gt=0)] = 30
    """Period of the burst pattern. Unit: s."""


class DynamicMetrics(Model):
    seed: int = 0
    """Seed of the pseudo-random variation (same seed, same values)."""
    temperature: TemperatureDynamics | None = None
    """Temperature that varies over time."""
    power: PowerDynamics | None = None
    """Power draw that varies over time."""
    utilization: UtilizationDynamics | None = None
    """Utilization that varies over time."""


class Gpm(Model):
    supported: bool | None = None
    """Whether the GPU answers the NVML GPM calls (nvidia-smi dmon --gpm-metrics); unset: Hopper and later do."""
    pcie_tx_mib_per_sec: NonNeg = 2048
    """PCIe transmit rate the GPM metric PCIE_TX_PER_SEC reports. Unit: MiB/s."""
    pcie_rx_mib_per_sec: NonNeg = 2048
    """PCIe receive rate the GPM metric PCIE_RX_PER_SEC reports. Unit: MiB/s."""


class XidSpec(Model):
    code: NonNeg = 0
    """Xid code raised with the failure (79 for fallen off the bus)."""


FailureMode = Literal["healthy", "lost", "fallen_off_bus", "ecc_uncorrectable"]


class Failure(Model):
    mode: FailureMode = "healthy"
    """Failure mode (nvml-mock-ctl fail sets it): lost, fallen_off_bus (0xff config, Xid 79), ecc_uncorrectable."""
    probability: Annotated[float, Field(ge=0, le=1)] | None = None
    """Chance that each NVML call on the GPU (past after_calls) starts the failure, 0-1, drawn from a seeded
    generator: the same seed starts it at the same call. Counted in each process that loads NVML; such a delayed
    failure lives in NVML only (lspci, /proc/driver/nvidia and the kernel log keep showing the GPU healthy)."""
    after_calls: NonNeg | None = None
    """NVML calls on the GPU that answer normally in each process before the failure starts (0: at once);
    with probability, the calls after these draw. A delayed failure lives in NVML only (see probability)."""
    seed: int = 0
    """Seed of the per-call draws of probability."""
    xid: XidSpec | None = None
    """Xid raised when the failure starts (default: 79 fallen off the bus, 48 uncorrectable ECC, none for lost)."""


class XidEvent(Model):
    """One Xid event raised on a GPU; ``seq`` increases node-wide so each is delivered once."""

    code: Annotated[int, Field(gt=0)]
    """Xid code (13, 31, 48, 79, ...); nvml-mock-ctl xid appends one."""
    seq: Annotated[int, Field(gt=0)]
    """Sequence number: events are delivered in this order, each once."""
    usec: NonNeg | None = None
    """When it was raised, in microseconds of CLOCK_MONOTONIC (the kernel log's time stamp); none: at boot."""


class FabricHealth(Model):
    degraded_bandwidth: bool = False
    """The fabric runs with degraded bandwidth."""
    route_recovery: bool = False
    """Route recovery is in progress."""
    route_unhealthy: bool = False
    """A route is unhealthy."""
    access_timeout_recovery: bool = False
    """Recovering from an access timeout."""
    incorrect_configuration: Literal[
        "none", "not_supported", "incorrect_sysguid", "incorrect_chassis_sn", "no_partition",
        "insufficient_nvlinks", "incompatible_gpu_fw", "invalid_location", "gpu_state_invalid",
    ] = "none"
    """Why the fabric is misconfigured (none: it is not)."""


class Fabric(Model):
    cluster_uuid: str = "00000000-0000-0000-0000-000000000001"
    """NVLink cluster (domain) UUID; a topology overlay may set it per node."""
    clique_id: NonNeg = 0
    """NVLink clique (partition) id; a topology overlay may set it per node."""
    state: Literal["auto", "completed", "not_started", "in_progress", "not_supported", ""] = "auto"
    """Fabric registration state; auto: not started until the fabric manager is ready, then completed."""
    health_summary: Literal["auto", "healthy", "unhealthy", "limited_capacity", "not_supported", ""] = "auto"
    """Fabric health summary; auto: derived from health."""
    health: FabricHealth = FabricHealth()
    """Fabric health flags; nvml-mock-ctl fabric-health sets them."""
    health_mask: NonNeg | None = None
    """Raw NVML fabric health mask; default: built from health."""


class NvlinkError(Model):
    """Injected NVLink errors, a clock per GPU: ``accrued[link]`` + ``rate`` x seconds since ``since_ms``.

    ``rate`` errors/s grow on each active link (or on ``links``) from ``since_ms`` (wall-clock ms; 0:
    from when the node came up) on top of ``accrued`` (errors per link index counted before it).
    ``nvml-mock-ctl nvlink-error`` sets all four; a profile sets the first two.
    """

    rate: Annotated[float, Field(ge=0, le=1e9)] = 0.0
    """Errors per second on each affected link (0 heals). Unit: errors/s."""
    links: list[NonNeg] = []
    """Affected link numbers (empty: every active link)."""
    since_ms: NonNeg = 0
    """When counting began, wall clock (0: when the node came up). Unit: ms."""
    accrued: list[NonNeg] = []
    """Errors per link index counted before since_ms."""


PeerType = Literal["", "direct_connected", "switch_connected"]


class Platform(Model):
    """Where a Blackwell GPU sits in its rack: nvmlDeviceGetPlatformInfo (nvidia-smi ``platformInfo``)."""

    chassis_serial_number: Annotated[str, Field(max_length=13)] = ""
    """Chassis serial number (nvmlDeviceGetPlatformInfo, GB200 racks; 13 characters at most)."""
    slot_number: NonNeg = 0
    """Slot of the compute tray in the rack."""
    tray_index: NonNeg = 0
    """Index of the compute tray."""
    host_id: NonNeg = 0
    """Host id within the tray."""
    peer_type: PeerType = ""
    """NVLink peer the platform reports: switch_connected (NVSwitch baseboards and racks), direct_connected, or
    "" (none)."""
    module_id: NonNeg = 0
    """Module id of the GPU on its board."""


class Sriov(Model):
    """The GPU's SR-IOV capability (a Mokka addition): the PCI SR-IOV extended capability, 0 VFs enabled."""

    total_vfs: NonNeg = 0
    """Virtual functions the capability offers (sriov_totalvfs); 0: no SR-IOV capability."""
    vf_offset: NonNeg = 4
    """Routing-id offset of the first VF from the PF (sriov_offset)."""
    vf_stride: NonNeg = 1
    """Routing-id distance between VFs (sriov_stride)."""
    vf_device_id: NonNeg = 0
    """PCI device id of the VFs (sriov_vf_device); 0: the PF's own."""


class DeviceConfig(Model):
    """Every per-GPU key; all optional so the same model validates defaults, devices[] entries and overrides."""

    name: str | None = None
    """Product name (nvidia-smi's Product Name), e.g. NVIDIA H100 80GB HBM3."""
    brand: Brand | None = None
    """Product brand (nvmlDeviceGetBrand)."""
    serial: str | None = None
    """Board serial number; default: derived from the profile and index."""
    board_part_number: str | None = None
    """Board part number."""
    gpu_part_number: str | None = None
    """GPU (chip) part number, nvidia-smi's GPU Part Number, e.g. 2330-885-A1; empty: N/A."""
    addressing_mode: Literal["none", "hmm", "ats"] | None = None
    """How the GPU addresses system memory (nvmlDeviceGetAddressingMode): ats on Grace (C2C), hmm where the
    driver and kernel have HMM, none; unset: N/A."""
    sparse_operation_mode: Mode | None = None
    """Sparse operation mode (nvidia-smi's Sparse Operation Mode); unset: N/A."""
    vbios_version: str | None = None
    """VBIOS version."""
    architecture: Architecture | None = None
    """GPU architecture (nvmlDeviceGetArchitecture)."""
    compute_capability: ComputeCapability | None = None
    """CUDA compute capability."""
    num_gpu_cores: NonNeg | None = None
    """Number of CUDA cores."""
    inforom: Inforom | None = None
    """InfoROM versions."""
    memory: Memory | None = None
    """Frame-buffer memory."""
    bar1_memory: Bar1Memory | None = None
    """BAR1 memory."""
    pci: Pci | None = None
    """PCI identity of the GPU."""
    pcie: Pcie | None = None
    """PCIe link."""
    power: Power | None = None
    """Power readings and limits."""
    thermal: Thermal | None = None
    """Temperatures and thresholds."""
    fan: Fan | None = None
    """Fans."""
    clocks: Clocks | None = None
    """Clocks."""
    clocks_throttle_reasons: ThrottleReasons | None = None
    """Active clock throttle reasons; nvml-mock-ctl throttle sets them."""
    pinned: list[Literal["temperature", "power", "clocks", "throttle"]] = []
    """Readings held at their configured values instead of following the load model (model/physics.py);
    nvml-mock-ctl temp/power/clocks/throttle pin theirs."""
    supported_clocks: SupportedClocks | None = None
    """Supported memory and graphics clock pairs (nvidia-smi -q -d SUPPORTED_CLOCKS)."""
    performance_state: PState | None = None
    """Performance state P0-P15; nvml-mock-ctl pstate sets it."""
    utilization: Utilization | None = None
    """Utilization."""
    encoder_stats: SessionStats | None = None
    """Video encoder sessions."""
    fbc_stats: SessionStats | None = None
    """Frame-buffer capture sessions."""
    ecc: Ecc | None = None
    """ECC mode and error counts."""
    retired_pages: RetiredPages | None = None
    """Retired pages (before Ampere)."""
    remapped_rows: RemappedRows | None = None
    """Row remapping (Ampere and later)."""
    display: Display | None = None
    """Display mode."""
    persistence_mode: Mode | None = None
    """Persistence mode."""
    compute_mode: Literal["default", "exclusive_thread", "prohibited", "exclusive_process"] | None = None
    """Compute mode."""
    mig: Mig | None = None
    """Multi-Instance GPU mode."""
    gpu_operation_mode: GpuOperationMode | None = None
    """GPU operation mode (GOM), on the boards that have one; unset: N/A, as on every datacenter board."""
    driver_model: CurrentPending | None = None
    """Driver model now and pending (Windows only; empty on Linux)."""
    accounting: Accounting | None = None
    """Per-process accounting."""
    virtualization: Virtualization | None = None
    """Virtualization."""
    gsp_firmware: GspFirmware | None = None
    """GSP firmware."""
    features: Features | None = None
    """Feature flags (only confidential_compute is read; the others are refused)."""
    grace_superchip: GraceSuperchip | None = None
    """Pairing with a Grace CPU."""
    topology: Topology | None = None
    """PCIe topology default."""
    processes: list[Process] | None = None
    """Processes running on the GPU (nvidia-smi's process list; nvml-mock-ctl set ... processes=...)."""
    dynamic_metrics: DynamicMetrics | None = None
    """Metrics that vary over time."""
    gpm: Gpm | None = None
    """GPU performance monitoring (the NVML GPM API)."""
    failure: Failure | None = None
    """Failure mode of the GPU."""
    xid_events: list[XidEvent] | None = None
    """Xid events raised so far (nvmlEventSetWait, the kernel log); the ctl keeps the latest 256, a ring buffer."""
    xid_events_dropped: NonNeg | None = None
    """How many older Xid events the ring buffer of xid_events dropped (nvml-mock-ctl status shows it)."""
    fabric: Fabric | None = None
    """NVLink fabric (GPU fabric info)."""
    nvlink_error: NvlinkError | None = None
    """Injected NVLink errors."""
    platform: Platform | None = None
    """Rack position (GB200 NVL72)."""
    sriov: Sriov | None = None
    """SR-IOV capability of the physical function (boards that have it); none: no SR-IOV."""


class DeviceEntry(DeviceConfig):
    index: NonNeg
    """GPU index this entry applies to (0-based; an entry overrides device_defaults for that GPU)."""
    uuid: Annotated[str, Field(pattern=r"^GPU-[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}$")] | None = None
    """GPU UUID (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx); default: derived from the profile and index."""
    minor_number: NonNeg | None = None
    """Minor number of /dev/nvidia<N>; default: the index."""
    grace_cpu_pair: NonNeg | None = None
    """Index of the Grace CPU this GPU is paired with."""


class NvlinkSwitch(Model):
    bdf: str
    """PCI address of the NVSwitch DDDD:BB:DD.F."""
    uuid: str = ""
    """NVSwitch UUID; default: derived."""
    device_id: NonNeg = 0x22A3  # NVSwitch (Hopper generation) PCI device id
    """PCI device id of the NVSwitch."""
    numa_node: int | None = None
    """NUMA node of the NVSwitch's PCI function."""
    pci_visible: bool = True  # baseboard / switch-tray NVSwitches are not host PCI functions
    """Whether the NVSwitch is a host PCI function (false for baseboard and switch-tray NVSwitches)."""

    @field_validator("device_id", mode="before",
                     json_schema_input_type=NonNeg | str)
    @classmethod
    def _pci_id(cls, value: object) -> object:
        return units.pci_id(units.NVIDIA)(value)

    @field_validator("bdf")
    @classmethod
    def _bdf(cls, value: str) -> str:
        if not BUS_ID_RE.match(value):
            raise ValueError(f"must look like DDDD:BB:DD.F, got {value!r}")
        return value.lower()


class NvlinkDefaults(Model):
    state: str = "active"
    """State of every link not listed (active or inactive)."""
    duty_cycle: Annotated[float, Field(ge=0, le=1)] = 0.05
    """Fraction of the link bandwidth in use, for throughput counters, 0-1."""
    counter_seed: NonNeg = 0
    """Seed of the link counters."""
    error_rate: Annotated[float, Field(ge=0)] = 0.0
    """Errors per second on every link. Unit: errors/s."""


class NvlinkLink(Model):
    link: NonNeg
    """Link number (0-17)."""
    state: str = ""
    """Link state (active, inactive); empty: the default state."""
    remote_device_type: str = "GPU"
    """What the link connects to: GPU, SWITCH or IBMNPU."""
    remote_pci_bus_id: str = "n/a"
    """PCI address of the remote end (n/a: derived)."""
    remote_index: NonNeg | None = None
    """Index of the remote GPU, for GPU-to-GPU links."""


class DeviceLinks(Model):
    index: NonNeg
    """GPU index these links belong to."""
    links: list[NvlinkLink]
    """The GPU's links."""


class Nvlink(Model):
    version: Annotated[int, Field(ge=1, le=6)] = 4
    """NVLink generation (1-6; 4 for Hopper, 5 for Blackwell)."""
    links_per_gpu: Annotated[int, Field(ge=0, le=18)] = 0
    """NVLink links per GPU (18 on H100 SXM5; 0: no NVLink)."""
    bandwidth_per_link_mbps: NonNeg = 0
    """Bandwidth of one link. Unit: MB/s."""
    c2c_enabled: bool = False
    """NVLink-C2C to a Grace CPU is enabled."""
    switches: list[NvlinkSwitch] = []
    """NVSwitches of the node."""
    defaults: NvlinkDefaults = NvlinkDefaults()
    """Defaults of every link."""
    device_links: list[DeviceLinks] = []
    """Links of particular GPUs."""
    links: list[NvlinkLink] = []
    """Links every GPU has."""


class RootComplex(Model):
    id: str
    """Root complex id pciDDDD:BB."""
    numa_node: NonNeg = 0
    """NUMA node of the root complex (mapped onto the host's online CPUs)."""
    devices: list[str] = []
    """PCI addresses of the functions below this root complex."""
    cpu_affinity: str | None = None
    """CPU list local to the root complex (e.g. 0-55); default: the NUMA node's CPUs."""

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
        if value is None:
            return value
        if len(value) > 4096 or not re.match(r"^\d{1,20}(-\d{1,20})?(,\d{1,20}(-\d{1,20})?)*$", value):
            raise ValueError(f"must be a CPU list like 0-71 or 0,2,4, got {value[:60]!r}")
        for part in value.split(","):
            low, _, high = part.partition("-")
            if int(high or low) >= MAX_CPUS or int(low) > int(high or low):
                raise ValueError(f"CPU ids must be below {MAX_CPUS} and ranges ascending, got {part!r}")
        return value


class PcieTopology(Model):
    root_complexes: list[RootComplex] = []
    """Root complexes and the functions below them."""
    cores_per_numa: Annotated[int, Field(gt=0)] = 64
    """CPU cores per NUMA node of the simulated machine."""

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
    """Stage InfiniBand HCAs."""
    hca_type: str = "MT4129"
    """HCA type (ibstat's CA type), e.g. MT4129 for ConnectX-7."""
    pci_device_id: NonNeg = 0x1021  # ConnectX-7
    """PCI device id of the HCAs (0x1021 for ConnectX-7)."""
    fw_version: str = "28.39.2048"
    """HCA firmware version."""
    hw_rev: str = "0x0"
    """HCA hardware revision."""
    board_id: str = "MT_0000000838"
    """HCA board id (PSID)."""
    link_layer: Literal["InfiniBand", "Ethernet"] = "InfiniBand"
    """Link layer of the ports."""
    rate_gbps: Literal[10, 25, 40, 56, 100, 200, 400, 800] = 400
    """Port rate. Unit: Gb/s."""
    port_state: Literal["DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"] = "ACTIVE"
    """Logical port state."""
    phys_state: Literal["Disabled", "Polling", "Training", "LinkUp", "LinkErrorRecovery", "PhyTest"] = "LinkUp"
    """Physical port state."""
    hcas_per_gpu: NonNeg = 1
    """HCAs per GPU where hca_count is 0."""
    hca_count: NonNeg = 0
    """Number of HCAs (0: hcas_per_gpu x GPUs)."""
    guid_prefix: str = "a088c20300ab"
    """First 12 hex digits of the node and port GUIDs."""
    node_desc_template: str = "{node_name} mlx5_{idx}"
    """Node description; {node_name} and {idx} are filled in."""

    @field_validator("pci_device_id", mode="before",
                     json_schema_input_type=NonNeg | str)
    @classmethod
    def _pci_id(cls, value: object) -> object:
        return units.pci_id(units.MELLANOX)(value)

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
    """Profile format version (1)."""
    name: str | None = None
    """Profile name (a Mokka addition)."""
    description: str | None = None
    """One line about the node type (a Mokka addition; mokka profile list shows it)."""
    system: System
    """Driver and CUDA versions, GPU count."""
    device_defaults: DeviceConfig = DeviceConfig()
    """Every GPU's values; devices[] entries override them per GPU."""
    devices: list[DeviceEntry] = []
    """Per-GPU values by index, over device_defaults."""
    nvlink: Nvlink | None = None
    """NVLink links, switches and their defaults."""
    pcie_topology: PcieTopology | None = None
    """PCIe root complexes and NUMA layout."""
    infiniband: Infiniband | None = None
    """InfiniBand HCAs."""
    dynamic_metrics_defaults: DynamicMetrics | None = None
    """Default dynamic metrics of every GPU."""

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
