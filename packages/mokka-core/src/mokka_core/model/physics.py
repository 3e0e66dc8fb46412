"""One load model per board: what a GPU reads when it works, from its utilization and its limits.

A profile's readings are the board at rest (the captures are idle: clocks at their floor, the
idle power draw, a cool die, ``gpu_idle`` active).  Under load the readings follow each other as
on a real board, evaluated once per render (the library serves them as plain values):

* **power**: the idle draw plus ``BUSY_POWER_SHARE`` of the headroom to the enforced limit, in
  proportion to GPU utilization;
* **temperature**: the idle temperature plus the same share of the way up to ``HOT_MARGIN_C`` below
  the board's max operating temperature (the steady state: no time constant is simulated);
* **clocks**: boost to the maximum while busy, pulled down by the throttle reasons in force;
* **throttle reasons**: ``gpu_idle`` at rest; ``sw_power_cap`` at the enforced limit;
  ``sw_thermal_slowdown`` above the max operating temperature; ``hw_thermal_slowdown`` at the
  slowdown threshold; the others as the configuration gives them;
* **memory**: what the profile uses plus every process's memory.

A reading named in the GPU's ``pinned`` list (``nvml-mock-ctl temp``/``power``/``clocks``/``throttle``
pin theirs) keeps its configured value, and the readings that depend on it follow: a GPU pinned at
95 C while busy runs slowed down, a busy GPU pinned at a draw above its limit is power capped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from .config import GpuConfig

PINNABLE = ("temperature", "power", "clocks", "throttle")
BUSY_POWER_SHARE = 0.9  # of the headroom between the idle draw and the enforced limit, at 100 % utilization
HOT_MARGIN_C = 5  # a fully loaded board settles this far below its max operating temperature
HOT_DEFAULT_C = 80  # where a board gives no thermal thresholds
THERMAL_CLOCK_FACTOR = {"hw_thermal_slowdown": 0.5, "sw_thermal_slowdown": 0.8}
DERIVED_REASONS = ("gpu_idle", "sw_power_cap", "sw_thermal_slowdown", "hw_thermal_slowdown")


class Clocks(NamedTuple):
    graphics: int
    sm: int
    memory: int
    video: int


class Readings(NamedTuple):
    temperature_c: int | None
    power_mw: int | None
    clocks: Clocks | None
    reasons: frozenset[str]  # nvmlClocksEventReason names in force
    pstate: str
    memory_used_bytes: int | None


def readings(config: GpuConfig) -> Readings:
    pinned = frozenset(config.pinned)
    load = (config.utilization.gpu if config.utilization else 0) / 100
    power_mw, share = _power(config, load, "power" in pinned)
    temperature = _temperature(config, share, "temperature" in pinned)
    reasons = _reasons(config, load, power_mw, temperature, "throttle" in pinned)
    clocks = _clocks(config, load, reasons, power_mw, "clocks" in pinned)
    pstate = config.performance_state or "P0"
    if load and "clocks" not in pinned:
        pstate = "P0"
    return Readings(temperature, power_mw, clocks, reasons, pstate, _memory_used(config))


def _power(config: GpuConfig, load: float, pinned: bool) -> tuple[int | None, float]:
    """(draw, share of the headroom to the enforced limit in use by the load)."""
    power = config.power
    if power is None:
        return None, BUSY_POWER_SHARE * load
    idle, limit = power.current_draw_mw, power.enforced_limit_mw or power.default_limit_mw
    share = BUSY_POWER_SHARE * load
    if pinned or not load or limit <= idle:
        return idle, share
    return round(idle + (limit - idle) * share), share


def _temperature(config: GpuConfig, share: float, pinned: bool) -> int | None:
    thermal = config.thermal
    if thermal is None:
        return None
    given = thermal.temperature_gpu_c
    if pinned or not share:
        return given
    if thermal.max_operating_c:
        hot = thermal.max_operating_c - HOT_MARGIN_C
    elif thermal.slowdown_threshold_c:
        hot = thermal.slowdown_threshold_c - 2 * HOT_MARGIN_C
    else:
        hot = HOT_DEFAULT_C
    return round(given + max(0, hot - given) * share)


def _reasons(config: GpuConfig, load: float, power_mw: int | None, temperature: int | None,
             pinned: bool) -> frozenset[str]:
    given = config.clocks_throttle_reasons
    named = {name for name in _REASON_NAMES if given is not None and getattr(given, name)}
    if pinned:
        return frozenset(named)
    reasons = named - set(DERIVED_REASONS)
    if not load:
        reasons.add("gpu_idle")
    power = config.power
    if power is not None and power_mw is not None and power_mw >= (power.enforced_limit_mw or power.default_limit_mw):
        reasons.add("sw_power_cap")
    thermal = config.thermal
    if thermal is not None and temperature is not None:
        if thermal.max_operating_c and temperature > thermal.max_operating_c:
            reasons.add("sw_thermal_slowdown")
        if thermal.slowdown_threshold_c and temperature >= thermal.slowdown_threshold_c:
            reasons.add("hw_thermal_slowdown")
    return frozenset(reasons)


_REASON_NAMES = ("gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown", "sync_boost",
                 "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "display_clocks_setting")


def _clocks(config: GpuConfig, load: float, reasons: frozenset[str], power_mw: int | None,
            pinned: bool) -> Clocks | None:
    k = config.clocks
    if k is None:
        return None
    idle = Clocks(k.graphics_current, k.sm_current, k.memory_current, k.video_current)
    if pinned or not load:
        return idle
    factor = 1.0
    for reason, slowed in THERMAL_CLOCK_FACTOR.items():
        if reason in reasons:
            factor = min(factor, slowed)
    power = config.power
    if "sw_power_cap" in reasons and power is not None and power_mw:
        factor = min(factor, (power.enforced_limit_mw or power.default_limit_mw) / power_mw)

    def busy(floor: int, top: int) -> int:
        return max(floor, round((top or floor) * factor))

    return Clocks(busy(k.graphics_current, k.graphics_max), busy(k.sm_current, k.sm_max),
                  k.memory_max or k.memory_current, busy(k.video_current, k.video_max))


def _memory_used(config: GpuConfig) -> int | None:
    memory = config.memory
    if memory is None:
        return None
    processes = sum(process.used_memory_mib for process in config.processes or ()) << 20
    return min(memory.used_bytes + processes, max(0, memory.total_bytes - memory.reserved_bytes))
