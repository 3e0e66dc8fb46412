"""``nvml-mock-ctl status``: what the node looks like now, per GPU and per surface."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..model.codec import encode

if TYPE_CHECKING:
    from ..model.node import Gpu, Node


def gpu_summary(gpu: Gpu) -> dict[str, Any]:
    """One GPU as consumers read it now (the load model's readings, ``model.physics``)."""
    from ..model.physics import readings

    config = gpu.config
    now = readings(config)
    ecc = config.ecc.errors.volatile if config.ecc else None
    faults = []
    if gpu.failure_mode != "healthy":
        faults.append(gpu.failure_mode)
    if gpu.delayed_failure:  # healthy here: each process's NVML starts it after its calls (failure.after_calls)
        faults.append(f"{gpu.delayed_failure} after NVML calls")
    if config.nvlink_error and config.nvlink_error.rate:
        faults.append(f"nvlink_errors={config.nvlink_error.rate:g}/s")
    if config.fabric and any(v for k, v in encode(config.fabric.health).items() if k != "incorrect_configuration"):
        faults.append("fabric_degraded")
    return {
        "index": gpu.index,
        "uuid": gpu.uuid,
        "bus_id": gpu.bus_id,
        "health": gpu.failure_mode,
        "temperature_c": now.temperature_c,
        "power_w": now.power_mw / 1000 if now.power_mw is not None else None,
        "utilization_pct": config.utilization.gpu if config.utilization else None,
        "clock_mhz": now.clocks.graphics if now.clocks else None,
        "sm_clock_mhz": now.clocks.sm if now.clocks else None,
        "memory_used_mib": now.memory_used_bytes >> 20 if now.memory_used_bytes is not None else None,
        "pstate": now.pstate,
        "pinned": list(config.pinned),
        "ecc_volatile": {"correctable": ecc.single_bit.total, "uncorrectable": ecc.double_bit.total} if ecc else None,
        "remapped_rows": {k: v for k, v in encode(config.remapped_rows).items() if k != "availability_histogram"}
        if config.remapped_rows else None,
        "throttle": sorted(now.reasons),
        "xid_events": [encode(event) for event in config.xid_events or ()],
        "xid_events_dropped": config.xid_events_dropped or 0,
        "faults": faults,
    }


MIG_LISTS = ("mig.gpu_instances", "mig.compute_instances")  # shown as the MIG devices they make


def mig_devices(gpu: Gpu, settings: dict[str, str]) -> list[str]:
    """The GPU's MIG devices as the setter record has them: `3g.40gb (GI 1, CI 0)`, in device order."""
    profiles = gpu.config.mig.gpu_instance_profiles if gpu.config.mig else ()
    gis = [int(v) for v in settings.get("mig.gpu_instances", "").split(",") if v]
    cis = [int(v) for v in settings.get("mig.compute_instances", "").split(",") if v]
    row_of = {gis[n]: gis[n + 1] for n in range(0, len(gis) - 2, 3)}
    names = []
    for n in range(0, len(cis) - 3, 4):
        row = row_of.get(cis[n])
        name = profiles[row].name if row is not None and row < len(profiles) else "?"
        names.append(f"{name} (GI {cis[n]}, CI {cis[n + 1]})")
    return names


def node_summary(node: Node, root: Path) -> dict[str, Any]:
    from ..stage import nvml_settings, staging

    staged = set(staging.staged_surfaces(root))
    settings = nvml_settings.read(root)
    return {
        "root": str(root),
        "node": node.node_name,
        "profile": node.profile_name,
        "gpus": [{**gpu_summary(gpu), "nvml_settings": settings.get(gpu.index, {}),
                  "mig_devices": mig_devices(gpu, settings.get(gpu.index, {}))} for gpu in node.gpus],
        "surfaces": {name: {"enabled": s.enabled, "state": s.state, "staged": name in staged}
                     for name, s in node.surfaces.items()},
    }


def table(summary: dict[str, Any]) -> str:
    lines = [f"Node {summary['node']} (profile {summary['profile']}) under {summary['root']}", ""]
    lines.append(f"{'GPU':<4}{'Health':<19}{'Temp':>6}{'Power':>9}{'Util':>6}{'Clock':>8}  {'ECC c/u':<10}"
                 f"{'Xid':<12}Faults, throttling")
    for gpu in summary["gpus"]:
        ecc = gpu["ecc_volatile"]
        xids = ",".join(str(e["code"]) for e in gpu["xid_events"]) or "-"
        if gpu["xid_events_dropped"]:
            xids = f"{gpu['xid_events_dropped']} dropped, {xids}"
        lines.append(
            f"{gpu['index']:<4}{gpu['health']:<19}{_num(gpu['temperature_c'], 'C'):>6}{_num(gpu['power_w'], 'W'):>9}"
            f"{_num(gpu['utilization_pct'], '%'):>6}{_num(gpu['clock_mhz'], 'MHz'):>8}  "
            f"{_ecc(ecc):<10}{xids:<12}"
            f"{', '.join(gpu['faults'] + [r for r in gpu['throttle'] if r != 'gpu_idle']) or '-'}"
        )
    changed = [f"  GPU {gpu['index']}: " + ", ".join(f"{k}={v}" for k, v in gpu["nvml_settings"].items()
                                                   if k not in MIG_LISTS)
               + "".join(f"; MIG {name}" for name in gpu["mig_devices"])
               for gpu in summary["gpus"] if gpu["nvml_settings"]]
    if changed:
        lines += ["", "Set through NVML (nvidia-smi -pl/-pm/-c/-e/-r…; cleared by reset):", *changed]
    lines.append("")
    lines.append("Surfaces: " + ", ".join(
        _surface(name, s) for name, s in summary["surfaces"].items()))
    return "\n".join(lines)


def _num(value: Any, unit: str) -> str:
    if value is None:
        return "-"
    return f"{value:g}{unit}" if isinstance(value, float) else f"{value}{unit}"


def _ecc(ecc: dict[str, int] | None) -> str:
    return f"{ecc['correctable']}/{ecc['uncorrectable']}" if ecc else "-"


def _surface(name: str, info: dict[str, Any]) -> str:
    if not info["enabled"]:
        return f"{name}=off"
    return f"{name}={info['state']}" + ("" if info["staged"] else " (not staged)")
