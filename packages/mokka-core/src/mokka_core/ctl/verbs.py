"""Each ctl verb as a change of the override document, checked against the node as it is now.

A verb is a :data:`~.store.Mutation`: it gets a copy of the document and the
resolved node, edits the document and returns the line to print.  Values out of
range are refused here with a message naming the value and the limit; anything
the verb lets through must be valid: ``model.apply`` lays it over the node as it is
(``set``, which writes values it cannot check, has the whole document validated).

Targets: ``all``, an index, a UUID or a PCI bus id.  A value written for ``all``
also clears that value from every per-GPU bucket, so ``temp all 80`` really
means every GPU reads 80.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..schema.limits import MAX_XID_EVENTS
from .store import Document, Mutation, Refused

if TYPE_CHECKING:
    from ..model.node import Gpu, Node

FAILURE_MODES = {"lost": "lost", "fallen-off-bus": "fallen_off_bus", "ecc-uncorrectable": "ecc_uncorrectable",
                 "healthy": "healthy"}
XID_FALLEN_OFF_BUS = 79
XID_DBE = 48
XID_NVLINK = 74

THROTTLE_REASONS = (
    "gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown", "hw_thermal_slowdown",
    "hw_power_brake_slowdown", "sync_boost", "sw_thermal_slowdown", "display_clocks_setting",
)
THROTTLE_ALIASES = {
    "idle": "gpu_idle", "app_clocks": "applications_clocks_setting", "power": "sw_power_cap",
    "power_cap": "sw_power_cap", "thermal": "hw_thermal_slowdown", "hw_thermal": "hw_thermal_slowdown",
    "power_brake": "hw_power_brake_slowdown", "sw_thermal": "sw_thermal_slowdown",
    "display_clocks": "display_clocks_setting",
}
FABRIC_FLAGS = {
    "degraded_bandwidth": "degraded_bandwidth", "degraded_bw": "degraded_bandwidth", "bandwidth": "degraded_bandwidth",
    "route_recovery": "route_recovery", "route_unhealthy": "route_unhealthy",
    "access_timeout_recovery": "access_timeout_recovery", "access_timeout": "access_timeout_recovery",
}
FABRIC_MISCONFIGURATIONS = (
    "not_supported", "incorrect_sysguid", "incorrect_chassis_sn", "no_partition", "insufficient_nvlinks",
    "incompatible_gpu_fw", "invalid_location", "gpu_state_invalid",
)


# --- targets and buckets ------------------------------------------------------------------------------

def select(node: Node, target: str) -> list[Gpu] | None:
    """The GPUs ``target`` names (``3``, a UUID or bus id, a list ``0,2``, a range ``0-3``); None for ``all``."""
    if target.strip().lower() == "all":
        return None
    chosen: dict[int, Gpu] = {}
    for part in (part.strip() for part in target.split(",")):
        span = re.fullmatch(r"(\d+)-(\d+)", part)
        if span is not None and int(span[1]) > int(span[2]):
            raise Refused(f"GPU range {part!r} runs backwards; write it low-high, e.g. {span[2]}-{span[1]}")
        names = [str(i) for i in range(int(span[1]), int(span[2]) + 1)] if span else [part]
        for name in names:
            if not name:
                raise Refused(f"empty GPU in {target!r}; give indices, UUIDs or bus ids separated by commas")
            try:
                gpu = node.gpu(name)
            except LookupError as exc:
                raise Refused(str(exc)) from None
            chosen.setdefault(gpu.index, gpu)
    return list(chosen.values())


def gpus_of(node: Node, target: str) -> list[Gpu]:
    chosen = select(node, target)
    return list(node.gpus) if chosen is None else chosen


def device_bucket(doc: Document, index: int) -> dict[str, Any]:
    devices = doc.setdefault("devices", {})
    return devices.setdefault(str(index), {})  # type: ignore[no-any-return]


def set_path(bucket: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    for part in parents:
        child = bucket.get(part)
        if not isinstance(child, dict):
            child = bucket[part] = {}
        bucket = child
    bucket[leaf] = value


def drop_path(bucket: dict[str, Any], dotted: str) -> None:
    *parents, leaf = dotted.split(".")
    trail = []
    for part in parents:
        child = bucket.get(part)
        if not isinstance(child, dict):
            return
        trail.append((bucket, part))
        bucket = child
    bucket.pop(leaf, None)
    for parent, part in reversed(trail):  # prune maps the removal left empty
        if parent[part] == {}:
            del parent[part]


def write(doc: Document, node: Node, target: str, values: dict[str, Any]) -> str:
    """Set dotted ``values`` for ``target``; returns how the target is named in messages."""
    chosen = select(node, target)
    if chosen is None:
        bucket = doc.setdefault("all", {})
        for dotted, value in values.items():
            set_path(bucket, dotted, value)
        for device in (doc.get("devices") or {}).values():
            for dotted in values:
                drop_path(device, dotted)
        return "all GPUs"
    for gpu in chosen:
        for dotted, value in values.items():
            set_path(device_bucket(doc, gpu.index), dotted, value)
    return ", ".join(f"GPU {gpu.index}" for gpu in chosen)


def in_range(what: str, value: float, low: float, high: float, unit: str = "") -> None:
    if not low <= value <= high:
        raise Refused(f"{what} {value:g}{unit} out of range {low:g}-{high:g}{unit}; override unchanged")


def pin(doc: Document, node: Node, target: str, reading: str) -> None:
    """Hold ``reading`` at the value just written on the target GPUs, out of the load model
    (``model.physics``): each GPU's ``pinned`` list gains it (lists replace, so per GPU)."""
    for gpu in gpus_of(node, target):
        set_path(device_bucket(doc, gpu.index), "pinned", sorted({*gpu.config.pinned, reading}))


def pin_dynamics(node: Node, target: str, block: str) -> dict[str, Any]:
    """Switch off a dynamic-metrics generator where one drives this value, so the pinned value shows."""
    for gpu in gpus_of(node, target):
        dynamics = gpu.config.dynamic_metrics
        if dynamics is not None and getattr(dynamics, block) is not None:
            return {f"dynamic_metrics.{block}": None}
    return {}


def next_seq(node: Node) -> int:
    return max((event.seq for gpu in node.gpus for event in gpu.config.xid_events or ()), default=0) + 1


def append_xid(doc: Document, gpu: Gpu, code: int, seq: int) -> None:
    """Record Xid ``code``, stamped now (the kernel log shows when it was raised, not when rendered)."""
    bucket = device_bucket(doc, gpu.index)
    events = bucket.get("xid_events")
    if events is None:
        events = [{"code": event.code, "seq": event.seq, "usec": event.usec} for event in gpu.config.xid_events or ()]
    events = [*events, {"code": code, "seq": seq, "usec": time.monotonic_ns() // 1000}]
    dropped = len(events) - MAX_XID_EVENTS
    if dropped > 0:  # a ring buffer: the oldest go, counted
        bucket["xid_events_dropped"] = bucket.get("xid_events_dropped", gpu.config.xid_events_dropped or 0) + dropped
        events = events[dropped:]
    bucket["xid_events"] = events


# --- GPU faults ---------------------------------------------------------------------------------------

def fail(target: str, mode_name: str) -> Mutation:
    mode = FAILURE_MODES.get(mode_name.replace("_", "-"))
    if mode is None:
        raise Refused(f"unknown failure mode {mode_name!r}; modes: {', '.join(FAILURE_MODES)}")

    def mutate(doc: Document, node: Node) -> str:
        seq = next_seq(node)
        gpus = gpus_of(node, target)
        for gpu in gpus:
            bucket = device_bucket(doc, gpu.index)
            if mode == "healthy":
                bucket.pop("failure", None)
                if "failure" in (doc.get("all") or {}) or gpu.config.failure is not None:
                    bucket["failure"] = {"mode": "healthy"}
                continue
            bucket["failure"] = {"mode": mode, "probability": None, "after_calls": None, "xid": None}
            if mode == "fallen_off_bus":
                append_xid(doc, gpu, XID_FALLEN_OFF_BUS, seq)
                seq += 1
            elif mode == "ecc_uncorrectable":
                raise_uncorrectable(bucket, gpu)
                append_xid(doc, gpu, XID_DBE, seq)
                seq += 1
        return f"ok: {', '.join(f'GPU {g.index}' for g in gpus)} {mode_name}"

    return mutate


def raise_uncorrectable(bucket: dict[str, Any], gpu: Gpu) -> None:
    """One more double-bit error in device memory (volatile and aggregate) and a pending row remap."""
    ecc = gpu.config.ecc
    for kind in ("volatile", "aggregate"):
        counts = getattr(ecc.errors, kind).double_bit if ecc is not None else None
        device_memory = (counts.device_memory if counts else 0) + 1
        total = (counts.total if counts else 0) + 1
        set_path(bucket, f"ecc.errors.{kind}.double_bit.device_memory", device_memory)
        set_path(bucket, f"ecc.errors.{kind}.double_bit.total", total)
    rows = gpu.config.remapped_rows
    set_path(bucket, "remapped_rows.uncorrectable", (rows.uncorrectable if rows else 0) + 1)
    set_path(bucket, "remapped_rows.pending", True)


def xid(target: str, code: int) -> Mutation:
    in_range("Xid", code, 1, 999)

    def mutate(doc: Document, node: Node) -> str:
        seq = next_seq(node)
        gpus = gpus_of(node, target)
        for n, gpu in enumerate(gpus):
            append_xid(doc, gpu, code, seq + n)
        return f"ok: Xid {code} raised on {', '.join(f'GPU {g.index}' for g in gpus)}"

    return mutate


# --- metrics ------------------------------------------------------------------------------------------

def temperature(target: str, celsius: int) -> Mutation:
    in_range("temperature", celsius, 0, 200, " C")

    def mutate(doc: Document, node: Node) -> str:
        values: dict[str, Any] = {"thermal.temperature_gpu_c": celsius, **pin_dynamics(node, target, "temperature")}
        named = write(doc, node, target, values)
        pin(doc, node, target, "temperature")
        return f"ok: {named} temperature {celsius} C"

    return mutate


def power(target: str, watts: float) -> Mutation:
    in_range("power", watts, 0, 100_000, " W")

    def mutate(doc: Document, node: Node) -> str:
        for gpu in gpus_of(node, target):
            limits = gpu.config.power
            if limits is None:
                raise Refused(f"GPU {gpu.index} has no power block in its profile; cannot set its power draw")
            high = (limits.max_limit_mw or limits.enforced_limit_mw or limits.default_limit_mw) / 1000
            if high:
                in_range(f"GPU {gpu.index} power", watts, 0, high, " W")
        values: dict[str, Any] = {"power.current_draw_mw": round(watts * 1000), **pin_dynamics(node, target, "power")}
        named = write(doc, node, target, values)
        pin(doc, node, target, "power")
        return f"ok: {named} power draw {watts:g} W"

    return mutate


def utilization(target: str, gpu_pct: int, memory_pct: int | None) -> Mutation:
    in_range("utilization", gpu_pct, 0, 100, " %")
    memory = gpu_pct if memory_pct is None else memory_pct
    in_range("memory utilization", memory, 0, 100, " %")

    def mutate(doc: Document, node: Node) -> str:
        values: dict[str, Any] = {"utilization.gpu": gpu_pct, "utilization.memory": memory,
                                  **pin_dynamics(node, target, "utilization")}
        return f"ok: {write(doc, node, target, values)} utilization {gpu_pct} % (memory {memory} %)"

    return mutate


def clocks(target: str, mhz: int, memory_mhz: int | None) -> Mutation:
    def mutate(doc: Document, node: Node) -> str:
        for gpu in gpus_of(node, target):
            top = gpu.config.clocks.graphics_max if gpu.config.clocks else 0
            in_range(f"GPU {gpu.index} graphics clock", mhz, 0, top or 100_000, " MHz")
            if memory_mhz is not None:
                mem_top = gpu.config.clocks.memory_max if gpu.config.clocks else 0
                in_range(f"GPU {gpu.index} memory clock", memory_mhz, 0, mem_top or 100_000, " MHz")
        values: dict[str, Any] = {"clocks.graphics_current": mhz, "clocks.sm_current": mhz}
        if memory_mhz is not None:
            values["clocks.memory_current"] = memory_mhz
        named = write(doc, node, target, values)
        pin(doc, node, target, "clocks")
        return f"ok: {named} clocks {mhz} MHz"

    return mutate


def throttle(target: str, reasons: Sequence[str]) -> Mutation:
    names = [r.strip().lower().replace("-", "_") for r in reasons]
    if names == ["none"]:
        active: set[str] = set()
    else:
        active = set()
        for name in names:
            canonical = THROTTLE_ALIASES.get(name, name)
            if canonical not in THROTTLE_REASONS:
                raise Refused(f"unknown throttle reason {name!r}; reasons: {', '.join(THROTTLE_REASONS)}, "
                              f"aliases: {', '.join(THROTTLE_ALIASES)}, or none alone")
            active.add(canonical)

    def mutate(doc: Document, node: Node) -> str:
        values = {f"clocks_throttle_reasons.{r}": r in active for r in THROTTLE_REASONS}
        named = write(doc, node, target, values)
        pin(doc, node, target, "throttle")
        return f"ok: {named} throttle {', '.join(sorted(active)) or 'none'}"

    return mutate


def pstate(target: str, state: str) -> Mutation:
    text = state.upper().removeprefix("P")
    if not text.isdigit():
        raise Refused(f"performance state must be 0-15 or P0-P15, got {state!r}")
    in_range("performance state", int(text), 0, 15)

    def mutate(doc: Document, node: Node) -> str:
        return f"ok: {write(doc, node, target, {'performance_state': f'P{int(text)}'})} P{int(text)}"

    return mutate


def ecc(target: str, correctable: int | None, uncorrectable: int | None, kinds: Sequence[str]) -> Mutation:
    if correctable is None and uncorrectable is None:
        raise Refused("give --correctable N and/or --uncorrectable N")
    for what, value in (("correctable", correctable), ("uncorrectable", uncorrectable)):
        if value is not None:
            in_range(f"{what} ECC count", value, 0, 10**12)

    def mutate(doc: Document, node: Node) -> str:
        values: dict[str, Any] = {}
        for kind in kinds:
            for bits, value in (("single_bit", correctable), ("double_bit", uncorrectable)):
                if value is not None:
                    values[f"ecc.errors.{kind}.{bits}.device_memory"] = value
                    values[f"ecc.errors.{kind}.{bits}.total"] = value
        return (f"ok: {write(doc, node, target, values)} ECC {'/'.join(kinds)} correctable={correctable} "
                f"uncorrectable={uncorrectable}")

    return mutate


def remapped_rows(target: str, correctable: int | None, uncorrectable: int | None, pending: bool | None,
                  failure: bool | None) -> Mutation:
    for what, value in (("correctable", correctable), ("uncorrectable", uncorrectable)):
        if value is not None:
            in_range(f"{what} remapped rows", value, 0, 100_000)

    def mutate(doc: Document, node: Node) -> str:
        values: dict[str, Any] = {}
        for key, value in (("correctable", correctable), ("uncorrectable", uncorrectable), ("pending", pending),
                           ("failure_occurred", failure)):
            if value is not None:
                values[f"remapped_rows.{key}"] = value
        if not values:
            raise Refused("nothing to change: give --correctable, --uncorrectable, --pending or --failure")
        return f"ok: {write(doc, node, target, values)} remapped rows " + " ".join(
            f"{k.split('.')[-1]}={v}" for k, v in values.items())

    return mutate


def fabric_health(target: str, flags: Sequence[str]) -> Mutation:
    names = [f.strip().lower().replace("-", "_") for f in flags]
    health: dict[str, Any] = {flag: False for flag in set(FABRIC_FLAGS.values())}
    health["incorrect_configuration"] = "none"
    if names not in (["healthy"], ["none"]):
        for name in names:
            if name in FABRIC_FLAGS:
                health[FABRIC_FLAGS[name]] = True
            elif name in FABRIC_MISCONFIGURATIONS:
                health["incorrect_configuration"] = name
            else:
                raise Refused(f"unknown fabric health flag {name!r}; flags: {', '.join(sorted(FABRIC_FLAGS))}, "
                              f"misconfigurations: {', '.join(FABRIC_MISCONFIGURATIONS)}, or healthy alone")

    def mutate(doc: Document, node: Node) -> str:
        for gpu in gpus_of(node, target):
            if gpu.config.fabric is None:
                raise Refused(f"GPU {gpu.index} ({node.profile_name}) has no NVLink fabric; "
                              "fabric health does not apply")
        values = {f"fabric.health.{key}": value for key, value in health.items()}
        values["fabric.health_summary"] = "auto"
        return f"ok: {write(doc, node, target, values)} fabric health {' '.join(names)}"

    return mutate


def nvlink_error(target: str, rate: float, links: list[int] | None) -> Mutation:
    in_range("NVLink error rate", rate, 0, 1e9, "/s")

    def mutate(doc: Document, node: Node) -> str:
        for gpu in gpus_of(node, target):
            if not gpu.links:
                raise Refused(f"GPU {gpu.index} has no NVLink links on this node")
            known = {link.link for link in gpu.links}
            bad = [n for n in links or () if n not in known]
            if bad:
                raise Refused(f"GPU {gpu.index} has no NVLink link {bad[0]} (links: {min(known)}-{max(known)})")
        values = {"nvlink_error.rate": rate, "nvlink_error.links": list(links or [])}
        done = write(doc, node, target, values)
        if rate > 0:  # the driver reports the link's errors as Xid 74 (and the switch as an SXid: the kernel log)
            seq = next_seq(node)
            for n, gpu in enumerate(gpus_of(node, target)):
                append_xid(doc, gpu, XID_NVLINK, seq + n)
        return f"ok: {done} NVLink error rate {rate:g}/s"

    return mutate


def set_values(target: str, assignments: Sequence[str]) -> Mutation:
    from ..schema.yamldoc import parse_yaml

    values: dict[str, Any] = {}
    for assignment in assignments:
        key, sep, raw = assignment.partition("=")
        if not sep or not key:
            raise Refused(f"expected key.path=value, got {assignment!r}")
        try:
            values[key.strip()] = parse_yaml(raw, key.strip()) if raw.strip() else None
        except ConfigError as exc:
            raise Refused("refused, override unchanged:\n  " + "\n  ".join(exc.lines())) from None

    def mutate(doc: Document, node: Node) -> str:
        return f"ok: {write(doc, node, target, values)} " + ", ".join(values)

    return mutate


# --- surfaces and reset -------------------------------------------------------------------------------

SURFACE_ACTIONS: dict[str, tuple[dict[str, Any], str]] = {
    "enable": ({"enabled": True}, "enabled"),
    "disable": ({"enabled": False}, "disabled"),
    "fail": ({"enabled": True, "state": "failed"}, "failed"),
    "heal": ({"state": "healthy"}, "healed"),
}


def surface(action: str, name: str) -> Mutation:
    from ..schema.overlays import SURFACES

    if name not in SURFACES:
        raise Refused(f"unknown surface {name!r}; surfaces: {', '.join(SURFACES)}")
    patch, done = SURFACE_ACTIONS[action]

    def mutate(doc: Document, node: Node) -> str:
        doc.setdefault("surfaces", {}).setdefault(name, {}).update(patch)
        return f"ok: surface {name} {done}"

    return mutate


def reset(target: str | None) -> Mutation:
    def mutate(doc: Document, node: Node) -> str:
        if target is None:
            doc.clear()
            return "ok: every override cleared"
        chosen = select(node, target)
        if chosen is None:
            doc.pop("all", None)
            doc.pop("devices", None)
            return "ok: GPU overrides cleared on all GPUs"
        for gpu in chosen:
            (doc.get("devices") or {}).pop(str(gpu.index), None)
        return f"ok: overrides of {', '.join(f'GPU {g.index}' for g in chosen)} cleared"

    return mutate


VERBS: dict[str, Callable[..., Mutation]] = {
    "fail": fail, "xid": xid, "temp": temperature, "power": power, "util": utilization, "clocks": clocks,
    "throttle": throttle, "pstate": pstate, "ecc": ecc, "remapped-rows": remapped_rows,
    "fabric-health": fabric_health, "nvlink-error": nvlink_error, "set": set_values,
}
