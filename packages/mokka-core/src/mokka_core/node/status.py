"""What a node looks like now, from the files under its root and its supervisord: ``mokka node status``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import MokkaError
from ..schema.overlays import SURFACES
from ..stage import nodefile, staging
from . import runstate
from .runstate import RunState
from .supervise import process_states


def node_status(root: Path) -> dict[str, Any]:
    """A JSON-able report: daemon, readiness, and per surface enabled/state/staged/services."""
    report: dict[str, Any] = {"root": str(root), "node": None, "daemon": None, "ready": False, "surfaces": {}}
    node = None
    try:
        spec = nodefile.load(root)
        node = spec.resolve()
        report["node"] = {"name": node.node_name, "profile": node.profile_name, "gpus": len(node.gpus)}
    except MokkaError as exc:
        report["error"] = str(exc)
    state = RunState.load(root)
    alive = state is not None and state.daemon_alive()
    if state is not None:
        report["daemon"] = {"pid": state.pid, "alive": alive, "phase": state.phase if alive else "dead",
                            "resting": alive and state.resting, "error": state.error}
    processes = process_states(root) or {}
    staged = set(staging.staged_surfaces(root))
    names = list(SURFACES) + sorted(staged - set(SURFACES))
    for name in names:
        settings = node.surfaces.get(name) if node is not None else None
        programs = {program: processes.get(program, "NOT RUNNING")
                    for program, owner in (state.services if state else {}).items() if owner == name}
        report["surfaces"][name] = {
            "enabled": bool(settings.enabled) if settings is not None else name in staged,
            "state": settings.state if settings is not None else "unknown",
            "staged": name in staged,
            "services": programs,
        }
    wanted_services = state.services if state else {}
    report["ready"] = bool(
        alive and state is not None and state.phase in (runstate.READY, runstate.RELOADING)
        and all(processes.get(program) == "RUNNING" for program in wanted_services)
    )
    return report


def no_node(report: dict[str, Any]) -> bool:
    """Nothing is there: no node file, no daemon, nothing staged (``mokka node status`` exits 1)."""
    return report["node"] is None and report["daemon"] is None and not any(
        surface["staged"] for surface in report["surfaces"].values())


def status_table(report: dict[str, Any]) -> str:
    lines = [f"Root {report['root']}"]
    node = report.get("node")
    daemon = report.get("daemon")
    if node:
        lines.append(f"Node {node['name']}: profile {node['profile']}, {node['gpus']} GPU(s)")
    elif daemon and daemon["alive"]:  # an edit broke the inputs: the daemon goes on serving what it rendered
        lines.append(f"Node keeps its last good state; its inputs no longer resolve: {report.get('error')}")
    else:
        lines.append(f"No node: {report.get('error', 'not staged')}")
    rests = " (at rest: a lean form of itself until there is work)" if daemon and daemon.get("resting") else ""
    lines.append(f"Daemon pid {daemon['pid']}: {daemon['phase']}{rests}" if daemon else "Daemon: not running")
    lines.append(f"Ready: {'yes' if report['ready'] else 'no'}")
    lines.append("")
    lines.append(f"{'Surface':<15}{'Enabled':<9}{'State':<9}{'Staged':<8}Services")
    for name, info in report["surfaces"].items():
        services = ", ".join(f"{p}={s}" for p, s in info["services"].items()) or "-"
        lines.append(f"{name:<15}{'yes' if info['enabled'] else 'no':<9}{info['state']:<9}"
                     f"{'yes' if info['staged'] else 'no':<8}{services}")
    return "\n".join(lines)
