"""The examples a ``--help`` shows, taken from the help text, for tests that run them.

A typer command's help has ``Example: CMD`` lines; ``nvml-mock-ctl`` and its commands list theirs
under ``examples:``/``example:``.  ``/tmp/node`` in an example is the node root it stages: a test
replaces it with a temporary one.  A long-running example (a daemon) runs as a :class:`Running`.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

BIN = Path(sys.executable).parent
EXAMPLE_ROOT = "/tmp/node"
TYPER_EXAMPLE = re.compile(r"^\s*Example: (.+)$", re.MULTILINE)
ARGPARSE_EXAMPLES = re.compile(r"^examples?:\n((?:  .+\n?)+)", re.MULTILINE)


def typer_examples(app: typer.Typer) -> dict[tuple[str, ...], str]:
    """{command path: example} for every ``Example:`` line of the app's commands' help."""
    return dict(_walk(typer.main.get_command(app), ()))


def _walk(command: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], str]]:
    for example in TYPER_EXAMPLE.findall(command.help or ""):
        yield path, example.strip()
    for name, sub in getattr(command, "commands", {}).items():  # a group (typer's own click has no Group class)
        yield from _walk(sub, (*path, name))


def ctl_examples() -> list[str]:
    """The examples of ``nvml-mock-ctl --help`` and of each ``nvml-mock-ctl COMMAND --help``, once each."""
    from ..ctl.cli import build_parser

    parser = build_parser()
    helps = [parser.format_help()]
    for action in parser._subparsers._group_actions if parser._subparsers else []:
        helps += [sub.format_help() for sub in getattr(action, "choices", {}).values()]
    found: list[str] = []
    for text in helps:
        block = ARGPARSE_EXAMPLES.search(text)
        found += [line.strip() for line in block.group(1).splitlines()] if block else []
    return list(dict.fromkeys(found))


def commands(example: str, root: Path) -> list[list[str]]:
    """An example as argv lists (``a; b`` is two), its comment dropped, the example root replaced, our
    programs named by their path in this environment."""
    argvs = []
    for part in example.replace(EXAMPLE_ROOT, str(root)).split(";"):
        argv = shlex.split(part, comments=True)
        if argv:
            argvs.append([str(BIN / argv[0]) if (BIN / argv[0]).exists() else argv[0], *argv[1:]])
    return argvs


def run_example(example: str, root: Path, cwd: Path, env: dict[str, str] | None = None) -> None:
    """Run the example; fail naming it, with its output, unless every command in it exits 0."""
    for argv in commands(example, root):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=cwd,
                              env={**os.environ, **(env or {})})
        assert done.returncode == 0, f"{example}\n{done.stdout}{done.stderr}"


class Running:
    """A long-running example, its output read all along (a full pipe would block it)."""

    def __init__(self, example: str, root: Path, cwd: Path) -> None:
        (argv,) = commands(example, root)
        self.example = example
        self.process = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=lambda: self.lines.extend(self.process.stdout or []), daemon=True)
        self._reader.start()

    def said(self, text: str) -> bool:
        """True once a line of its output holds ``text``, or once it has exited (the caller checks which)."""
        return any(text in line for line in self.lines) or self.process.poll() is not None

    def stop(self) -> None:
        """SIGTERM (unless it exited); fail unless it exits 0."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=60)
        self._reader.join(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()
        assert self.process.returncode == 0, f"{self.example}\n{''.join(self.lines)}"
