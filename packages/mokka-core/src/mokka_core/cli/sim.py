"""The command line every ``mokka-sim-<name>`` package shares: stage, teardown, serve, check, plan.

Run alone, a surface stages only itself; this is what its container image runs
(``docker run ... mokka-sim-pci stage``).
"""

from __future__ import annotations

import inspect
import logging
import sys
import threading
from pathlib import Path
from typing import Annotated

import typer

from ..errors import MokkaError
from ..model.node import Node
from ..model.spec import NodeSpec
from ..stage import render
from ..stage.beneath import make_root
from ..stage.paths import find_root
from ..stage.staging import stage_wave, teardown
from ..stage.surface import CharDevice, Copy, Dir, File, Runtime, StageContext, Surface, Symlink
from .options import GpusOpt, NodeNameOpt, OverlayFileOpt, ProfileFileOpt, ProfileOpt, RootOpt, version_option

FailedOpt = Annotated[bool, typer.Option("--failed", help="Stage this surface in its failed form.")]

def make_app(surface_cls: type[Surface], summary: str) -> typer.Typer:
    name = surface_cls.name
    app = typer.Typer(
        name=f"mokka-sim-{name}",
        help=f"{summary}\n\nStages only the {name} surface of a simulated GPU node under --root.",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
    )

    def options(version: bool = False) -> None:
        pass

    # set as an object: a string annotation naming this function's locals would not resolve
    options.__annotations__["version"] = Annotated[
        bool, version_option(f"mokka-sim-{name}", lambda: _version_of(surface_cls))]
    app.callback()(options)

    def context(root: Path | None, profile: str | None, profile_file: Path | None, gpus: int | None,
                node_name: str | None, failed: bool, overlay_file: Path | None = None,
                ) -> tuple[Surface, StageContext, Node]:
        """The surface, where it is staged (``root`` None: not on disk, for ``plan``) and the node.

        The gpu surface's NVML state file carries the keys of the other installed surfaces (NVLink,
        fabric state): they are NVML's view of those layers, not files of their own."""
        if overlay_file is not None and not overlay_file.is_file():
            raise MokkaError(f"--overlay-file: {overlay_file} does not exist")
        settings = {name: {"enabled": True, "state": "failed" if failed else "healthy"}}
        spec = NodeSpec(profile=profile, profile_file=profile_file, gpus=gpus, node_name=node_name,
                        overlay_file=overlay_file, surfaces=settings)
        node = spec.resolve()
        ctx = render.context(root or Path("/"), booted_ms=None if root else 0)
        if name == "gpu":
            ctx = render.with_contributions(ctx, node, render.installed_surfaces())
        return surface_cls(), ctx, node

    @app.command()
    def stage(root: RootOpt = None, profile: ProfileOpt = None, profile_file: ProfileFileOpt = None,
              gpus: GpusOpt = None, node_name: NodeNameOpt = None, failed: FailedOpt = False,
              overlay_file: OverlayFileOpt = None) -> None:
        """Stage this surface under --root (all or nothing).

        Example: mokka-sim-NAME stage --root /tmp/node -p h100
        """
        surface, ctx, node = context(node_root(root, makes=True), profile, profile_file, gpus, node_name, failed,
                                     overlay_file)
        plan = surface.plan(node, ctx)
        stage_wave({name: plan}, ctx.root)
        typer.echo(f"{name}: staged {len(plan)} entries under {ctx.root}")

    @app.command("teardown")
    def teardown_cmd(root: RootOpt = None) -> None:
        """Remove everything this surface staged under --root, and nothing else.

        Example: mokka-sim-NAME teardown --root /tmp/node
        """
        where = node_root(root)
        removed = teardown(where, name)
        typer.echo(f"{name}: {'removed' if removed else 'nothing staged'} under {where}")

    @app.command()
    def check(root: RootOpt = None, profile: ProfileOpt = None, profile_file: ProfileFileOpt = None,
              gpus: GpusOpt = None, node_name: NodeNameOpt = None, failed: FailedOpt = False,
              overlay_file: OverlayFileOpt = None) -> None:
        """Compare what is staged under --root with the node state; exit 1 and list problems if they differ.

        Example: mokka-sim-NAME check --root /tmp/node -p h100
        """
        surface, ctx, node = context(node_root(root), profile, profile_file, gpus, node_name, failed, overlay_file)
        problems = surface.check(node, ctx)
        for problem in problems:
            typer.echo(problem, err=True)
        if problems:
            raise typer.Exit(1)
        typer.echo(f"{name}: ok")

    @app.command()
    def plan(profile: ProfileOpt = None, profile_file: ProfileFileOpt = None, gpus: GpusOpt = None,
             node_name: NodeNameOpt = None, failed: FailedOpt = False, overlay_file: OverlayFileOpt = None) -> None:
        """Print what stage would create, one entry per line, without touching the disk.

        Example: mokka-sim-NAME plan -p h100 --gpus 2
        """
        surface, ctx, node = context(None, profile, profile_file, gpus, node_name, failed, overlay_file)
        for entry in surface.plan(node, ctx):
            typer.echo(describe_entry(entry))

    @app.command()
    def serve(root: RootOpt = None, profile: ProfileOpt = None, profile_file: ProfileFileOpt = None,
              gpus: GpusOpt = None, node_name: NodeNameOpt = None, failed: FailedOpt = False,
              overlay_file: OverlayFileOpt = None) -> None:
        """Stage, run this surface's services in the foreground until SIGTERM/SIGINT, then tear down.

        Example: mokka-sim-NAME serve --root /tmp/node -p h100
        """
        from ..node.foreground import foreground, log_to_stdout
        from ..run.services import ServiceFailed, Services

        surface, ctx, node = context(node_root(root, makes=True), profile, profile_file, gpus, node_name, failed,
                                     overlay_file)
        services = {service.name: service for service in surface.services(node, ctx)}
        program = f"mokka-sim-{name}"
        log_to_stdout(program)
        log = logging.getLogger(f"mokka_core.cli.sim.{name}")

        def serve_node(stop: threading.Event, ready: threading.Event) -> None:
            stage_wave({name: surface.plan(node, ctx)}, ctx.root)
            try:
                with Services(ctx.root, services) as running:
                    running.start()
                    running.wait_ready(interrupted=stop.is_set)
                    ready.set()
                    log.info("serving under %s (%d service(s)); SIGTERM to stop", ctx.root, len(services))
                    while not stop.wait(0.2):
                        exited = running.exited()
                        if exited is not None:
                            raise ServiceFailed(f"service {exited} exited; stopping")
            finally:
                teardown(ctx.root, name)
                log.info("torn down")

        raise typer.Exit(foreground(program, serve_node))

    for command in app.registered_commands:  # the examples name this package's command
        if command.callback is not None and command.callback.__doc__:
            command.help = inspect.cleandoc(command.callback.__doc__).replace("mokka-sim-NAME", f"mokka-sim-{name}")
    return app


def _version_of(surface_cls: type[Surface]) -> str:
    """The surface package's own version (``<package>/version.py``)."""
    import importlib

    return str(importlib.import_module(surface_cls.__module__.split(".")[0] + ".version").__version__)


def node_root(root: Path | None, makes: bool = False) -> Path:
    """--root, else $MOKKA_ROOT, else a cluster node's root; never / unless given (``--root /``).  ``makes``:
    the command stages there, so the root must be one no other user controls (made where missing)."""
    found = find_root(root, creates=True)
    if makes:
        make_root(found.absolute())
    return found


def describe_entry(entry: object) -> str:
    if isinstance(entry, Dir):
        return f"dir     /{entry.path}"
    if isinstance(entry, File):
        return f"file    /{entry.path} ({len(entry.data())} bytes, {entry.mode:o})"
    if isinstance(entry, Copy):
        return f"copy    /{entry.path} <- {entry.source}"
    if isinstance(entry, Symlink):
        return f"link    /{entry.path} -> {entry.target}"
    if isinstance(entry, CharDevice):
        return f"chardev /{entry.path} {entry.major}:{entry.minor}"
    if isinstance(entry, Runtime):
        return f"runtime /{entry.path} (written by the node)"
    return repr(entry)


def run(app: typer.Typer) -> None:
    logging.basicConfig(level=logging.WARNING, format=f"{app.info.name}: %(message)s")
    try:
        app()
    except MokkaError as exc:
        print(str(exc), file=sys.stderr)
        sys.exit(1)
