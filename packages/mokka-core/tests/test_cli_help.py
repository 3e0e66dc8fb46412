"""Every argument and option of every command line we install has help text, and each answers --help and
--version.

The command lines are the console scripts of mokka-core and of every installed surface package
(plus ``mokka-mig-follow``, a service ``mokka run`` starts as a module): typer apps are walked as
click commands; an argparse program is run with ``--help`` and its parser taken when it parses.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from importlib import import_module
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
import typer

#: run as ``python -m``, not installed as a console script
MODULE_PROGRAMS = {"mokka-mig-follow": "mokka_core.node.follow:main"}


def programs() -> dict[str, str]:
    found = {ep.name: ep.value for ep in entry_points(group="console_scripts")
             if ep.value.startswith(("mokka_core.", "mokka_sim_"))}
    return {**found, **MODULE_PROGRAMS}


def test_every_console_script_of_ours_is_found() -> None:
    assert {"mokka", "nvml-mock-ctl", "mokka-allocwatch", "mokka-nri", "mokka-mig-follow"} <= set(programs())


class Parsed(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser


class Execs(Exception):
    """The command execs a native program (nv-fabricmanager): its options are that program's."""

    def __init__(self, path: str) -> None:
        self.path = path


def argparse_parser(main: Callable[..., object], program: str, monkeypatch: pytest.MonkeyPatch
                    ) -> argparse.ArgumentParser:
    def caught(self: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        raise Parsed(self)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", caught)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", caught)
    monkeypatch.setattr(os, "execv", lambda path, _args: (_ for _ in ()).throw(Execs(str(path))))
    monkeypatch.setattr(sys, "argv", [program, "--help"])
    monkeypatch.setenv("MOKKA_CTL_IN_PROCESS", "1")  # nvml-mock-ctl: parse here, never hand it to a daemon
    with pytest.raises(Parsed) as parsed:
        main()
    return parsed.value.parser


def argparse_without_help(parser: argparse.ArgumentParser, where: str) -> Iterator[str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                if not choice.help:
                    yield f"{where} {choice.dest} (the command)"
            for name, sub in action.choices.items():
                yield from argparse_without_help(sub, f"{where} {name}")
        elif not isinstance(action, argparse._HelpAction) and not action.help:
            yield f"{where} {'/'.join(action.option_strings) or action.dest}"


def native_without_help(path: str, where: str) -> Iterator[str]:
    """The options of a native program's --help (argparse's layout: ``  -x, --long VALUE  text``) without text."""
    done = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=30, check=True)
    options = done.stdout.partition("\noptions:\n")[2].partition("\n\n")[0].splitlines()
    assert options, f"{where}: no options in {path} --help"
    for line in options:
        names, _, text = line.strip().partition("  ")
        if names.startswith("-") and not text.strip():
            yield f"{where} {names}"


def typer_without_help(command: Any, where: str) -> Iterator[str]:
    if not (command.help or command.short_help):
        yield f"{where} (the command)"
    for param in command.params:
        if not getattr(param, "help", None):
            yield f"{where} {'/'.join(param.opts)}"
    for name, sub in getattr(command, "commands", {}).items():  # a group (typer's own click has no Group class)
        yield from typer_without_help(sub, f"{where} {name}")


@pytest.mark.parametrize("program", sorted(programs()))
def test_every_parameter_has_help(program: str, monkeypatch: pytest.MonkeyPatch) -> None:
    module_name, function = programs()[program].split(":")
    module = import_module(module_name)
    app = getattr(module, "app", None)
    if isinstance(app, typer.Typer):
        missing = list(typer_without_help(typer.main.get_command(app), program))
    else:
        try:
            parser = argparse_parser(getattr(module, function), program, monkeypatch)
        except Execs as execs:
            missing = list(native_without_help(execs.path, program))
        else:
            missing = list(argparse_without_help(parser, program))
    assert not missing, f"without help text: {', '.join(missing)}"


def test_the_walk_finds_a_parameter_without_help() -> None:
    bare = typer.Typer()

    @bare.command()
    def cmd(name: str, count: int = typer.Option(1, "--count")) -> None:
        """A command."""

    parser = argparse.ArgumentParser()
    parser.add_argument("--quiet", action="store_true")
    assert list(typer_without_help(typer.main.get_command(bare), "bare")) == ["bare name", "bare --count"]
    assert list(argparse_without_help(parser, "prog")) == ["prog --quiet"]


#: fakes of NVIDIA programs whose real counterparts have no --version (nvidia-imex-ctl's usage lists
#: none; the real fabric manager ships no ctl at all): they answer it as the real ones would, with usage
WITHOUT_VERSION = {"nvidia-imex-ctl", "nv-fabricmanager-ctl"}


@pytest.mark.parametrize("program", sorted(programs()))
def test_every_program_answers_help_and_version(program: str, tmp_path: Path) -> None:
    """Each command line prints its help and its version and exits 0, run as people run it."""
    from mokka_core.model.spec import NodeSpec
    from mokka_core.stage import nodefile

    root = tmp_path / "root"
    nodefile.save(root, NodeSpec(profile="h100"))  # the fake daemons' version is the node's driver's
    env = {**os.environ, "MOKKA_ROOT": str(root), "HOME": str(tmp_path)}
    module = MODULE_PROGRAMS.get(program, "").partition(":")[0]
    command = [sys.executable, "-m", module] if module else [str(Path(sys.executable).parent / program)]
    for flag in ("--help", "--version"):
        done = subprocess.run([*command, flag], capture_output=True, text=True, env=env, timeout=120,
                              stdin=subprocess.DEVNULL)
        if flag == "--version" and program in WITHOUT_VERSION:
            assert done.returncode == 2 and "usage:" in done.stderr, done
            continue
        assert done.returncode == 0 and done.stdout.strip(), f"{program} {flag}: {done}"
        if flag == "--version" and program.startswith(("mokka", "nvml-mock-ctl")):
            assert done.stdout.split()[0] == program, done.stdout
