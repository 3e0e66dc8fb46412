"""``nvml-mock-ctl --install-completion`` / ``--show-completion``: the shell functions, written where typer
writes ``mokka``'s.

The function runs the command with :data:`~mokka_core.ctl.COMPLETE_VAR` set and the command line up
to the cursor in ``COMP_LINE``; :mod:`.completion` answers, one candidate a line.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import COMPLETE_VAR

#: what bash takes as the word being completed (the line splits further at COMP_WORDBREAKS: = and :)
CURRENT_VAR = "_NVML_MOCK_CTL_CURRENT"
SHELLS = ("bash", "zsh")

BASH_SCRIPT = """\
{function}() {{
    local IFS=$'\\n'
    COMPREPLY=( $(env {complete}=bash COMP_LINE="${{COMP_LINE:0:COMP_POINT}}" \\
                  {current}="${{COMP_WORDS[COMP_CWORD]}}" "$1" 2>/dev/null) )
    # a key block (fan.) or a key (fan.speed_percent=) goes on without a space
    if [[ ${{#COMPREPLY[@]}} -eq 1 && ${{COMPREPLY[0]}} == *[.=] ]]; then
        compopt -o nospace 2>/dev/null
    fi
    return 0
}}

complete -o default -F {function} {prog}
"""

ZSH_SCRIPT = """\
#compdef {prog}

{function}() {{
    local -a candidates
    candidates=("${{(@f)$(env {complete}=zsh COMP_LINE="${{BUFFER[1,CURSOR]}}" {current}="$PREFIX" \\
                          "${{words[1]}}" 2>/dev/null)}}")
    candidates=(${{candidates:#}})
    (( ${{#candidates}} )) || {{ _files; return }}
    # a key block (fan.) or a key (fan.speed_percent=) goes on without a space
    compadd -Q -S '' -- ${{(M)candidates:#*[.=]}}
    compadd -Q -- ${{candidates:#*[.=]}}
}}

if [[ ${{funcstack[1]}} == _{prog} ]]; then  # autoloaded from fpath (--install-completion): complete now
    {function} "$@"
else  # sourced (--show-completion's text in .zshrc)
    compdef {function} {prog}
fi
"""


def script(shell: str, prog: str) -> str:
    template = BASH_SCRIPT if shell == "bash" else ZSH_SCRIPT
    return template.format(function=f"_{prog.replace('-', '_')}_completion", prog=prog, complete=COMPLETE_VAR,
                           current=CURRENT_VAR)


class ShellAction(argparse.Action):
    """``--install-completion [SHELL]`` / ``--show-completion [SHELL]``: done while parsing (as --version is)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs="?", choices=SHELLS, metavar="SHELL",
                         default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, value: Any,
                 option_string: str | None = None) -> None:
        shell = value or detect_shell()
        prog = parser.prog
        if shell not in SHELLS:
            parser.exit(1, f"{prog}: shell completion is for {' and '.join(SHELLS)}; {shell or 'this shell'} "
                           f"is not one (name the shell: {option_string} bash)\n")
        if self.dest == "show_completion":
            sys.stdout.write(script(shell, prog))
        else:
            path = install(shell, prog, Path.home())
            print(f"{shell} completion installed in {path}")
            print("Completion will take effect once you restart the terminal")
        parser.exit(0)


def detect_shell() -> str | None:
    """The shell this command runs in: the nearest ancestor process that is a shell, else $SHELL's name."""
    known = {*SHELLS, "sh", "dash", "ash", "ksh", "mksh", "fish", "tcsh", "csh", "pwsh", "nu", "xonsh"}
    pid = os.getppid()
    for _ in range(32):
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip().lstrip("-")
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        if name in known:
            return name
        pid = int(stat.rpartition(")")[2].split()[1])  # the field after the command name is the parent's pid
        if pid <= 1:
            break
    shell = os.environ.get("SHELL")
    return os.path.basename(shell) if shell else None


def install(shell: str, prog: str, home: Path) -> Path:
    """Write the completion for ``shell`` where typer puts ``mokka``'s and have the shell's rc file load it."""
    from ..stage.store import atomic_write

    if shell == "bash":
        path, rc_file = home / ".bash_completions" / f"{prog}.sh", home / ".bashrc"
        line = f"source '{path}'"
    else:
        path, rc_file = home / ".zfunc" / f"_{prog}", home / ".zshrc"
        line = "fpath+=~/.zfunc; autoload -Uz compinit; compinit"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, script(shell, prog))
    try:
        rc = rc_file.read_text()
    except FileNotFoundError:
        rc = ""
    if line not in rc.splitlines():
        # appended, not replaced: the rc file is the user's (often a link into their dotfiles)
        separator = "\n" if rc and not rc.endswith("\n") else ""
        with rc_file.open("a") as out:
            out.write(f"{separator}{line}\n")
    return path
