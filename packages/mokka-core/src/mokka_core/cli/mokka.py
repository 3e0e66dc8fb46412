"""The ``mokka`` command: profiles, the resolved node, installed surfaces.

Thin by design: every command parses options, calls into the library and prints.
A :class:`MokkaError` becomes one clear message on stderr and exit status 1.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from ..errors import ConfigError, MokkaError, StateValueError
from ..model.spec import NodeSpec, surface_settings
from ..schema.builtin import BUILTIN_PROFILES, DEFAULT_PROFILE, builtin_text, load_builtin
from ..version import __version__
from .options import DisableOpt, FailOpt, GpusOpt, NodeNameOpt, ProfileFileOpt, ProfileOpt, version_option

if TYPE_CHECKING:
    from ..model.node import Node

# what one command needs (the state-file renderer, the codec, run's staging) it imports itself: `mokka run`
# pays for no other command's modules

app = typer.Typer(
    name="mokka",
    help="Mokka: a driver-level NVIDIA GPU simulator. Real nvidia-smi, pynvml, lspci and lsmod see a "
    "believable GPU node built from one profile.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
profile_app = typer.Typer(help="GPU profiles: list and show the built-in ones, validate files, describe a key, "
                          "print the JSON Schema or the key reference, import a real node's nvidia-smi -q -x "
                          "capture, diff a profile against one.", no_args_is_help=True)
app.add_typer(profile_app, name="profile")
from .capture import profile_diff, profile_import  # noqa: E402 - twins of real nodes
from .node import node_app  # noqa: E402 - the `mokka node` daemon commands

profile_app.command("import")(profile_import)
profile_app.command("diff")(profile_diff)

app.add_typer(node_app, name="node")
fetch_app = typer.Typer(help="Fetch what a node stages but Mokka does not ship (into a cache).", no_args_is_help=True)
app.add_typer(fetch_app, name="fetch")


@app.callback()
def mokka_options(
    version: Annotated[bool, version_option("mokka", lambda: __version__)] = False,
) -> None:
    """Mokka: a driver-level NVIDIA GPU simulator."""

@profile_app.command("list")
def profile_list() -> None:
    """List the built-in profiles with their GPU, count and description."""
    for name in BUILTIN_PROFILES:
        profile = load_builtin(name)
        count = profile.system.num_devices or len(profile.devices)
        typer.echo(f"{name:<7} {count:>2} x {profile.device_defaults.name:<24} {profile.description or ''}")


@profile_app.command("show")
def profile_show(name: Annotated[str, typer.Argument(help="Built-in profile name.")]) -> None:
    """Print a built-in profile's YAML (a starting point for your own: mokka profile show h100 > my.yaml)."""
    typer.echo(builtin_text(name), nl=False)


@profile_app.command("validate")
def profile_validate(files: Annotated[list[Path], typer.Argument(help="Profile YAML files.")]) -> None:
    """Check profile files; print every problem with file, key path and value. Exit 1 if any is bad."""
    from ..schema.loader import load_profile
    from ..stage.nvml_view import render_nvml_state

    bad = False
    for path in files:
        try:
            profile = load_profile(path)
            # what `run` refuses, validate refuses: the node is resolved and its state file rendered too
            render_nvml_state(NodeSpec(profile_file=path).resolve())
        except StateValueError as exc:  # the renderer knows the state-file key, not the file
            typer.echo(f"{path}: {exc}", err=True)
            bad = True
            continue
        except MokkaError as exc:
            typer.echo(str(exc), err=True)
            bad = True
            continue
        typer.echo(f"{path}: ok ({profile.device_defaults.name or 'unnamed GPU'})")
    if bad:
        raise typer.Exit(1)


@profile_app.command("schema")
def profile_schema() -> None:
    """Print the JSON Schema of the profile format (for editor completion and validation)."""
    from ..schema.profile import Profile

    typer.echo(json.dumps(Profile.model_json_schema(), indent=2))


@profile_app.command("describe")
def profile_describe(
    key: Annotated[str, typer.Argument(help="Key path, e.g. device_defaults.power.default_limit_mw, devices[0].uuid.")],
) -> None:
    """Print one profile key's description, type, default, unit, who reads it and an example."""
    from ..schema.reference import describe, example

    found = describe(key)
    builtins = {name: builtin_text(name) for name in sorted(BUILTIN_PROFILES, key=lambda n: n != DEFAULT_PROFILE)}
    typer.echo(f"{found.path}\n  {found.description}")
    for label, value in (("type", found.type), ("default", found.default.strip("`")), ("unit", found.unit),
                         ("read by", found.readers), ("example", example(found.path, builtins))):
        if value:
            typer.echo(f"  {label + ':':<9}{value}")


@profile_app.command("docs")
def profile_docs() -> None:
    """Print the reference of every profile key as Markdown (docs/profile.md is this output)."""
    from ..schema.reference import markdown

    typer.echo(markdown(), nl=False)


@app.command("show")
def show(
    profile: ProfileOpt = None,
    profile_file: ProfileFileOpt = None,
    gpus: GpusOpt = None,
    node_name: NodeNameOpt = None,
    disable: DisableOpt = [],  # noqa: B006 - typer needs a literal default
    fail: FailOpt = [],  # noqa: B006
    as_json: Annotated[bool, typer.Option("--json", help="Print the whole node state as JSON.")] = False,
) -> None:
    """Resolve a node (profile, count, surfaces) and print what every surface will see."""
    from ..model.codec import encode

    spec = NodeSpec(
        profile=profile, profile_file=profile_file, gpus=gpus, node_name=node_name,
        surfaces=surface_settings(disable, fail),
    )
    node = spec.resolve()
    if as_json:
        typer.echo(json.dumps(encode(node), indent=2))
    else:
        typer.echo(node_table(node))


RUN_CONTEXT = {"allow_extra_args": True, "ignore_unknown_options": True}
CommandArg = Annotated[list[str], typer.Argument(help="The command to run, after --.", show_default=False)]


def _node_spec(profile: str | None, profile_file: Path | None, gpus: int | None, node_name: str | None,
               disable: list[str], fail: list[str]) -> NodeSpec:
    try:
        surfaces = surface_settings(disable, fail)
    except ConfigError as exc:  # a usage error: exit 2 with the list of surfaces
        raise typer.BadParameter(str(exc).split(": ", 1)[-1], param_hint="--disable/--fail") from None
    return NodeSpec(profile=profile, profile_file=profile_file, gpus=gpus, node_name=node_name, surfaces=surfaces)


@app.command("run", context_settings=RUN_CONTEXT)
def run_cmd(
    command: CommandArg,
    profile: ProfileOpt = None,
    profile_file: ProfileFileOpt = None,
    gpus: GpusOpt = None,
    node_name: NodeNameOpt = None,
    disable: DisableOpt = [],  # noqa: B006
    fail: FailOpt = [],  # noqa: B006
) -> None:
    """Run CMD on a simulated node: the node appears at the real paths (/sys, /dev, /proc/driver,
    /proc/modules, /dev/kmsg, /usr/bin/nvidia-smi, the NVML library, /lib/modules/RELEASE) in a
    private mount namespace, with the node's services running; the host is untouched.

    Needs root (or unprivileged user namespaces: device nodes are then empty files). On a kernel
    without /proc/modules (no module support) procfs cannot gain the file: CMD then runs through
    mokka-proc-files, whose seccomp filter answers every open of it (static Go programs too) with
    the node's; stat and access still find no file.

    Example: mokka run --profile h100 -- nvidia-smi
    """
    from ..run.command import main_run

    spec = _node_spec(profile, profile_file, gpus, node_name, disable, fail)
    raise typer.Exit(main_run(spec, command))


@app.command("shim", context_settings=RUN_CONTEXT)
def shim_cmd(
    command: CommandArg,
    profile: ProfileOpt = None,
    profile_file: ProfileFileOpt = None,
    gpus: GpusOpt = None,
    node_name: NodeNameOpt = None,
    disable: DisableOpt = [],  # noqa: B006
    fail: FailOpt = [],  # noqa: B006
) -> None:
    """Run CMD on a simulated node without namespaces: the LD_PRELOAD shim redirects /sys, /dev and
    /proc paths into the staged root (dynamically linked C programs only).

    Example: mokka shim --profile h100 -- lspci -nn
    """
    from ..run.command import main_run

    spec = _node_spec(profile, profile_file, gpus, node_name, disable, fail)
    raise typer.Exit(main_run(spec, command, use_shim=True))


@fetch_app.command("nvidia-smi")
def fetch_nvidia_smi(
    branches: Annotated[list[str] | None, typer.Argument(help="Driver branches (default: every one Debian ships: "
                                                         "535, 550, 555).")] = None,
) -> None:
    """Download Debian's real nvidia-smi (non-free, unpacked only, never a driver package) into the cache.

    The gpu surface stages the branch nearest the profile's driver at /usr/bin/nvidia-smi.
    Needs apt-get and the network; the cache is nvidia-smi/ in $MOKKA_CACHE (default ~/.cache/mokka).
    """
    from ..stage import nvidia_smi

    for branch in branches or list(nvidia_smi.SUITES):
        typer.echo(f"nvidia-smi {branch}: {nvidia_smi.fetch(branch)}")


@app.command("surfaces")
def surfaces() -> None:
    """List the surface packages installed in this environment."""
    from ..stage.surface import discover

    for name, surface in discover().items():
        typer.echo(f"{name:<14} {surface.__module__}.{surface.__qualname__}")


def node_table(node: Node) -> str:
    gpu0 = node.gpus[0].config
    lines = [
        f"Node {node.node_name}: profile {node.profile_name}, {len(node.gpus)} x {gpu0.name}",
        f"Driver {node.system.driver_version}, CUDA {node.system.cuda_version_major}.{node.system.cuda_version_minor}",
        "Surfaces: " + ", ".join(
            f"{name}={'off' if not s.enabled else s.state}" for name, s in node.surfaces.items()
        ),
        "",
        f"{'GPU':<4}{'UUID':<42}{'Bus Id':<14}{'NUMA':<6}{'Links':<6}{'Memory':>10}  State",
    ]
    for gpu in node.gpus:
        memory = gpu.config.memory.total_bytes // 2**20 if gpu.config.memory else 0
        numa = "-" if gpu.numa_node is None else str(gpu.numa_node)
        active = sum(1 for link in gpu.links if link.active)
        lines.append(
            f"{gpu.index:<4}{gpu.uuid:<42}{gpu.bus_id:<14}{numa:<6}{active:<6}{memory:>7}MiB  {gpu.failure_mode}"
        )
    if node.switches:
        lines.append(f"NVSwitches: {', '.join(s.bus_id for s in node.switches if s.pci_visible) or 'not PCI-visible'}")
    if node.hcas:
        lines.append(f"HCAs: {', '.join(f'{h.name}@{h.bus_id}' for h in node.hcas)}")
    return "\n".join(lines)


#: commands whose process may end the moment they return: they leave nothing for the interpreter's shutdown
#: to finish, which costs ~10 ms of ``mokka run``'s start-up budget
EXIT_AT_ONCE = frozenset({"run", "shim"})


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="mokka: %(message)s")
    args = sys.argv[1:]
    try:
        narrowed(app, args)()
    except MokkaError as exc:
        print(str(exc), file=sys.stderr)
        sys.exit(1)
    except SystemExit as done:
        if command_name(args) in EXIT_AT_ONCE:
            exit_at_once(done)
        raise


def exit_at_once(done: SystemExit) -> NoReturn:
    """End the process as ``done`` would, without the interpreter's shutdown: output flushed, then _exit."""
    status = done.code if isinstance(done.code, int) else 0 if done.code is None else 1
    if done.code is not None and not isinstance(done.code, int):
        print(done.code, file=sys.stderr)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader that went away, as the interpreter's own flush would report
            status = status or 120
    os._exit(status)


def command_name(args: list[str]) -> str | None:
    """The command (or group) ``mokka ARGS`` names: its first argument that is not an option (none of the
    top-level options takes a value)."""
    return next((arg for arg in args if not arg.startswith("-")), None)


def narrowed(whole: typer.Typer, args: list[str]) -> typer.Typer:
    """``whole`` with only the command or group ``args`` name registered: typer builds every registered
    command's options before it parses one (~15 ms, a twentieth of ``mokka run``), and the one named parses,
    errs and helps the same alone.  Anything else (top-level help, a mistyped name) gets the whole app."""
    name = command_name(args)
    commands = [info for info in whole.registered_commands if info.name == name]
    groups = [info for info in whole.registered_groups if info.name == name]
    if name is None or (not commands and not groups):
        return whole
    only = copy.copy(whole)
    only.registered_commands, only.registered_groups = commands, groups
    return only


__all__ = ["DEFAULT_PROFILE", "app", "main", "narrowed"]
