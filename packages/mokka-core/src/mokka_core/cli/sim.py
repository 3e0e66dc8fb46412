"""The command line every ``mokka-sim-<name>`` package shares: stage, teardown, serve, check, plan.

Run alone, a surface stages only itself; this is what its container image runs
(``docker run ... mokka-sim-pci stage``).
"""

from __future__ import annotations

import logging
import sys
import threading
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import MokkaError
from ..model.spec import NodeSpec
from ..schema.builtin import BUILTIN_PROFILES
from ..stage.native import native_dir
from ..stage.staging import stage_wave, teardown
from ..stage.surface import CharDevice, Copy, Dir, File, StageContext, Surface, Symlink

RootOpt = Annotated[
    Path, typer.Option("--root", envvar="MOKKA_ROOT", help="Directory the node is staged under ($MOKKA_ROOT).")
]
ProfileOpt = Annotated[
    Optional[str],
    typer.Option("--profile", "-p", envvar="MOKKA_PROFILE", help=f"Built-in profile: {', '.join(BUILTIN_PROFILES)}."),
]
ProfileFileOpt = Annotated[
    Optional[Path], typer.Option("--profile-file", envvar="MOKKA_PROFILE_FILE", help="Profile YAML file.")
]
GpusOpt = Annotated[Optional[int], typer.Option("--gpus", "-n", envvar="MOKKA_GPUS", help="GPU count.")]
NodeNameOpt = Annotated[Optional[str], typer.Option("--node-name", envvar="NODE_NAME", help="Node name.")]
FailedOpt = Annotated[bool, typer.Option("--failed", help="Stage this surface in its failed form.")]
OverlayOpt = Annotated[
    Optional[Path],
    typer.Option("--overlay-file", envvar="MOKKA_OVERLAY_FILE", help="Topology overlay (cliques)."),
]


def make_app(surface_cls: type[Surface], summary: str) -> typer.Typer:
    name = surface_cls.name
    app = typer.Typer(
        name=f"mokka-sim-{name}",
        help=f"{summary}\n\nStages only the {name} surface of a simulated GPU node under --root.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )

    def context(root: Path, profile: str | None, profile_file: Path | None, gpus: int | None,
                node_name: str | None, failed: bool, overlay_file: Path | None = None,
                ) -> tuple[Surface, StageContext, NodeSpec]:
        if overlay_file is not None and not overlay_file.is_file():
            raise MokkaError(f"--overlay-file: {overlay_file} does not exist")
        settings = {name: {"enabled": True, "state": "failed" if failed else "healthy"}}
        spec = NodeSpec(profile=profile, profile_file=profile_file, gpus=gpus, node_name=node_name,
                        overlay_file=overlay_file, surfaces=settings)
        return surface_cls(), StageContext(root=root, native_dir=native_dir()), spec

    @app.command()
    def stage(root: RootOpt = Path("/"), profile: ProfileOpt = None, profile_file: ProfileFileOpt = None,
              gpus: GpusOpt = None, node_name: NodeNameOpt = None, failed: FailedOpt = False,
              overlay_file: OverlayOpt = None) -> None:
        """Stage this surface under --root (all or nothing). Example: mokka-sim-NAME stage --root /tmp/node -p h100"""
        surface, ctx, spec = context(root, profile, profile_file, gpus, node_name, failed, overlay_file)
        plan = surface.plan(spec.resolve(), ctx)
        stage_wave({name: plan}, root)
        typer.echo(f"{name}: staged {len(plan)} entries under {root}")

    @app.command("teardown")
    def teardown_cmd(root: RootOpt = Path("/")) -> None:
        """Remove everything this surface staged under --root, and nothing else."""
        removed = teardown(root, name)
        typer.echo(f"{name}: {'removed' if removed else 'nothing staged'} under {root}")

    @app.command()
    def check(root: RootOpt = Path("/"), profile: ProfileOpt = None, profile_file: ProfileFileOpt = None,
              gpus: GpusOpt = None, node_name: NodeNameOpt = None, failed: FailedOpt = False,
              overlay_file: OverlayOpt = None) -> None:
        """Compare what is staged under --root with the node state; exit 1 and list problems if they differ."""
        surface, ctx, spec = context(root, profile, profile_file, gpus, node_name, failed, overlay_file)
        problems = surface.check(spec.resolve(), ctx)
        for problem in problems:
            typer.echo(problem, err=True)
        if problems:
            raise typer.Exit(1)
        typer.echo(f"{name}: ok")

    @app.command()
    def plan(profile: ProfileOpt = None, profile_file: ProfileFileOpt = None, gpus: GpusOpt = None,
             node_name: NodeNameOpt = None, failed: FailedOpt = False, overlay_file: OverlayOpt = None) -> None:
        """Print what stage would create, one entry per line, without touching the disk."""
        surface, ctx, spec = context(Path("/"), profile, profile_file, gpus, node_name, failed, overlay_file)
        for entry in surface.plan(spec.resolve(), ctx):
            typer.echo(describe_entry(entry))

    @app.command()
    def serve(root: RootOpt = Path("/"), profile: ProfileOpt = None, profile_file: ProfileFileOpt = None,
              gpus: GpusOpt = None, node_name: NodeNameOpt = None, failed: FailedOpt = False,
              overlay_file: OverlayOpt = None) -> None:
        """Stage, run this surface's services in the foreground until SIGTERM/SIGINT, then tear down.

        Example: mokka-sim-NAME serve --root /tmp/node -p h100
        """
        from ..node.foreground import foreground, log_to_stdout
        from ..run.services import ServiceFailed, Services

        surface, ctx, spec = context(root, profile, profile_file, gpus, node_name, failed, overlay_file)
        node = spec.resolve()
        services = {service.name: service for service in surface.services(node, ctx)}
        program = f"mokka-sim-{name}"
        log_to_stdout(program)
        log = logging.getLogger(f"mokka_core.cli.sim.{name}")

        def serve_node(stop: threading.Event, ready: threading.Event) -> None:
            stage_wave({name: surface.plan(node, ctx)}, root)
            try:
                with Services(root, services) as running:
                    running.start()
                    running.wait_ready(interrupted=stop.is_set)
                    ready.set()
                    log.info("serving under %s (%d service(s)); SIGTERM to stop", root, len(services))
                    while not stop.wait(0.2):
                        exited = running.exited()
                        if exited is not None:
                            raise ServiceFailed(f"service {exited} exited; stopping")
            finally:
                teardown(root, name)
                log.info("torn down")

        raise typer.Exit(foreground(program, serve_node))

    return app


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
    return repr(entry)


def run(app: typer.Typer) -> None:
    logging.basicConfig(level=logging.WARNING, format=f"{app.info.name}: %(message)s")
    try:
        app()
    except MokkaError as exc:
        print(str(exc), file=sys.stderr)
        sys.exit(1)
