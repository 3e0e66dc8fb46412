"""``mokka node up|down|status``: thin typer commands over :func:`.daemon.run` and friends.

This is the contract the Helm chart runs; keep option names stable.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import time
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ..model.spec import NodeSpec, surface_settings
from ..node.foreground import foreground
from ..node.settings import REST_AFTER_S
from ..schema.surfaces import SURFACES
from ..stage import staging
from ..stage.paths import find_root
from .options import DisableOpt, FailOpt, GpusOpt, NodeNameOpt, OverlayFileOpt, ProfileFileOpt, ProfileOpt, RootOpt

node_app = typer.Typer(help="Run a simulated GPU node: stage all surfaces, supervise services, re-render; "
                       "its status and its log.",
                       no_args_is_help=True)


def _seconds(value: float) -> float:
    """A duration in seconds: finite and not negative (``nan`` compares false with everything, so it is
    refused here rather than read as "never")."""
    if not math.isfinite(value) or value < 0:
        raise typer.BadParameter(f"seconds, 0 or more, got {value}")
    return value


@node_app.command("up")
def up(
    profile: ProfileOpt = None,
    profile_file: ProfileFileOpt = None,
    gpus: GpusOpt = None,
    root: RootOpt = None,
    node_name: NodeNameOpt = None,
    overlay_file: OverlayFileOpt = None,
    surfaces: Annotated[Optional[str], typer.Option("--surfaces", help="Comma-separated surfaces to run "
                                                    "(default: every installed one).")] = None,
    surfaces_file: Annotated[Optional[Path], typer.Option(
        "--surfaces-file", envvar="MOKKA_SURFACES_FILE",
        help="Surface settings, watched like the profile: a change is re-rendered in place (surfaces staged, "
             "removed or failed, their services started or stopped), no restart. YAML: `version: 1` and "
             "`surfaces: {NAME: {enabled: true|false, state: healthy|failed}}`, e.g. `surfaces: {pci: {state: "
             "failed}, ib: {enabled: false}}`. --disable/--fail go over it, nvml-mock-ctl's changes over "
             "both.")] = None,
    disable: DisableOpt = [],  # noqa: B006 - typer needs a literal default
    fail: FailOpt = [],  # noqa: B006
    teardown_deadline: Annotated[float, typer.Option("--teardown-deadline", help="Seconds teardown may take.")] = 10.0,
    host_kmsg: Annotated[Optional[Path], typer.Option(
        "--host-kmsg", envvar="MOKKA_HOST_KMSG",
        help="Also write every record of the node's kernel log (its Xids), once, to this kernel log of the host "
             "(e.g. /dev/kmsg, or /host/dev/kmsg in a pod), so host log watchers see them. Default: nothing "
             "is written outside the root.")] = None,
    cdi_spec_dir: Annotated[Optional[Path], typer.Option(
        "--cdi-spec-dir", envvar="MOKKA_CDI_SPEC_DIR",
        help="The container runtime's CDI directory (e.g. /var/run/cdi, or where a pod mounts it): its "
             "nvidia.yaml becomes a link to the spec the cdi surface stages under the root (the root must be "
             "at the same path for the runtime), removed at teardown. Default: the spec stays under the "
             "root.")] = None,
    rest_after: Annotated[float, typer.Option(
        "--rest-after", envvar="MOKKA_NODE_REST_AFTER", callback=_seconds,
        help="Seconds a ready node with nothing to do waits before the daemon rests: it execs a lean form of "
             "itself (same pid, a few MB) that wakes it again for the next ctl command, file change or "
             "signal. 0: never rests.")] = REST_AFTER_S,
) -> None:
    """Stage the node (all surfaces or none), supervise services, re-render when the profile, overlay,
    surfaces or override file changes; SIGTERM tears it down.

    Example: mokka node up --profile h100 --gpus 8 --root /tmp/node
    """
    from ..node import rest
    from ..node.daemon import run
    from ..node.logstream import daemon_logging
    from ..node.settings import NodeSettings

    try:
        resume = rest.take()  # back from rest: the same command line, and the node to adopt
    except ValueError as exc:
        typer.echo(f"mokka-node: cannot resume from rest: {exc}", err=True)
        raise typer.Exit(1) from None

    settings_by_surface = surface_settings(disable, fail)
    only = None
    if surfaces:
        only = tuple(s.strip() for s in surfaces.split(",") if s.strip())
        unknown = [s for s in only if s not in SURFACES]
        if unknown:
            raise typer.BadParameter(f"unknown surface(s) {', '.join(unknown)}; surfaces: {', '.join(SURFACES)}",
                                     param_hint="--surfaces")
        for name in SURFACES:
            if name not in only:
                settings_by_surface.setdefault(name, {})["enabled"] = False
    spec = NodeSpec(profile=profile, profile_file=profile_file.absolute() if profile_file else None, gpus=gpus,
                    node_name=node_name, overlay_file=overlay_file.absolute() if overlay_file else None,
                    surfaces=settings_by_surface, surfaces_file=surfaces_file.absolute() if surfaces_file else None)
    from ..ctl.cli import execute_captured

    settings = NodeSettings(root=find_root(root, creates=True), spec=spec, only=only,
                            teardown_deadline_s=teardown_deadline, ctl=execute_captured, log_echo=sys.stdout,
                            host_kmsg=str(host_kmsg.absolute()) if host_kmsg else None,
                            cdi_spec_dir=str(cdi_spec_dir.absolute()) if cdi_spec_dir else None,
                            rest_after_s=rest_after if rest_after > 0 else None, resume=resume)
    daemon_logging()
    raise typer.Exit(foreground("mokka-node", lambda stop, ready: run(settings, stop, ready)))


@node_app.command("down")
def down(
    root: RootOpt = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for a running daemon.")] = 15.0,
) -> None:
    """Tear a node down: signal its daemon if it runs, then remove whatever is left (also after SIGKILL).

    Example: mokka node down --root /tmp/node
    """
    from ..node.runstate import RunState
    from ..node.teardown import teardown_node

    where = find_root(root).absolute()
    state = RunState.load(where)
    if state is not None and state.daemon_alive():
        try:
            signal_daemon(state.pid, timeout, state)
        except PermissionError:
            try:
                owner = f"uid {Path(f'/proc/{state.pid}').stat().st_uid}"
            except OSError:
                owner = "another user"
            typer.echo(f"mokka: the node under {where} is run by daemon pid {state.pid} of {owner}, which this "
                       f"user (uid {os.geteuid()}) may not stop: run `mokka node down` as its user or as root",
                       err=True)
            raise typer.Exit(1) from None
    done = teardown_node(where, time.monotonic() + 10.0, run_state=state)
    left = [*done.left, *staging.recover(where)]  # recover: an interrupted wave's leftovers
    if left:
        typer.echo(f"node under {where}: not torn down completely, left: {', '.join(left)}", err=True)
        raise typer.Exit(1)
    typer.echo(f"node under {where}: torn down" + (f" (left over: {', '.join(done.removed)})" if done.removed else ""))


@node_app.command("status")
def status(
    root: RootOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    ready: Annotated[bool, typer.Option("--ready", help="Exit 0 only if published and services run "
                                        "(readiness probe).")] = False,
) -> None:
    """Show each surface (enabled, state, staged, services) and the daemon; exit 1 where there is no node.

    Example: mokka node status --root /tmp/node --json
    """
    from ..node.status import no_node, node_status, status_table

    report = node_status(find_root(root).absolute())
    if as_json:
        typer.echo(json.dumps(report, indent=2))
    elif no_node(report):
        typer.echo(f"mokka: no node: {report.get('error', 'not staged')}", err=True)
    else:
        typer.echo("ready" if ready and report["ready"] else status_table(report))
    if no_node(report) or (ready and not report["ready"]):
        raise typer.Exit(1)


def _log_sources(ctx: typer.Context, incomplete: str) -> list[str]:
    """Shell completion of ``mokka node logs SERVICE``: the sources of the node --root (or the default) names."""
    from ..errors import MokkaError
    from ..node.logstream import sources

    given = ctx.params.get("root")  # as typed: completion parses without converting
    try:
        where = find_root(Path(given) if given else None).absolute()
    except MokkaError:
        return []
    return [name for name in sources(where) if name.startswith(incomplete)]


@node_app.command("logs")
def logs(
    service: Annotated[Optional[str], typer.Argument(help="Only this source's lines: a service (a supervisord "
                                                     "program), supervisord or mokka-node (default: all).",
                                                     show_default=False, autocompletion=_log_sources)] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines until interrupted "
                                         "or the node is torn down.")] = False,
    root: RootOpt = None,
) -> None:
    """Print the node's log: the daemon's lines, supervisord's and every service's, each prefixed [SOURCE].

    Example: mokka node logs nv-fabricmanager --root /tmp/node
    """
    from ..node.logstream import read_node_log, sources
    from ..stage.store import NodeStore

    where = find_root(root).absolute()
    if not NodeStore(where).node_log.exists():
        typer.echo(f"mokka: no node under {where} (no node log)", err=True)
        raise typer.Exit(1)
    known = sources(where)
    if service is not None and service not in known:
        typer.echo(f"mokka: no service {service!r} in the node under {where}; there are: {', '.join(known)}",
                   err=True)
        raise typer.Exit(1)
    try:
        for line in read_node_log(where, service, follow):
            typer.echo(line)
    except FileNotFoundError:  # torn down since
        typer.echo(f"mokka: no node under {where} (no node log)", err=True)
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        pass


def signal_daemon(pid: int, timeout: float, state: Any) -> None:
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and state.daemon_alive():
        time.sleep(0.05)
    if state.daemon_alive():
        typer.echo(f"daemon pid {pid} did not stop within {timeout:.0f} s; killing it", err=True)
        os.kill(pid, signal.SIGKILL)
