"""nvml-mock-ctl's shell completion: installed as typer installs mokka's, used by a real bash.

The shell is handed the line as bash splits it (COMP_WORDS, COMP_CWORD: = and : are words of their
own) and the line itself (COMP_LINE, COMP_POINT), as bash does when TAB is pressed.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from mokka_core.ctl.cli import build_parser
from mokka_core.ctl.completion import FREE, VALUES, candidates
from mokka_core.stage import snapshot
from mokka_core.stage.store import SNAPSHOT
from mokka_core.testing.runner import recording_node

BIN = Path(sys.executable).parent
BASH = shutil.which("bash")
ZSH = shutil.which("zsh")
CTL = "nvml-mock-ctl"

pytestmark = pytest.mark.skipif(BASH is None, reason="bash is not installed")


def environment(home: Path, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in ("MOKKA_ROOT", "MOKKA_CTL_IN_PROCESS")}
    return {**env, "HOME": str(home), "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", **extra}


def install(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # `; :` keeps bash the parent of the command (a lone command is exec'd): the shell it runs in
    return subprocess.run([str(BASH), "--norc", "-c", " ".join([CTL, "--install-completion", *args]) + "; :"],
                          capture_output=True, text=True, env=environment(home), timeout=60)


def completions(line: str, home: Path, words: Sequence[str] | None = None, **env: str) -> list[str]:
    """What bash offers at the end of ``line`` with the installed completion; ``words``: COMP_WORDS where
    bash splits ``line`` further than at blanks."""
    if not (home / ".bashrc").exists():
        installed = install(home)
        assert installed.returncode == 0 and "bash completion installed" in installed.stdout, installed
    words = list(words) if words is not None else line.split() + ([""] if line.endswith(" ") else [])
    script = (f"source ~/.bashrc; COMP_LINE={shlex.quote(line)}; COMP_POINT=${{#COMP_LINE}}; "
              f"COMP_WORDS=({' '.join(shlex.quote(word) for word in words)}); COMP_CWORD={len(words) - 1}; "
              f"$(complete -p {CTL} | sed 's/.*-F \\([^ ]*\\) .*/\\1/') {CTL}; "
              "printf '%s\\n' \"${COMPREPLY[@]}\"")
    done = subprocess.run([str(BASH), "--norc", "-c", script], capture_output=True, text=True,
                          env=environment(home, **env), timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_install_writes_the_script_and_sources_it_once(tmp_path: Path) -> None:
    first = install(tmp_path)
    script = tmp_path / ".bash_completions" / f"{CTL}.sh"
    assert first.returncode == 0, first
    assert first.stdout.splitlines() == [f"bash completion installed in {script}",
                                         "Completion will take effect once you restart the terminal"]
    assert install(tmp_path, "bash").returncode == 0
    assert (tmp_path / ".bashrc").read_text().splitlines().count(f"source '{script}'") == 1


def test_install_keeps_what_the_rc_file_had(tmp_path: Path) -> None:
    (tmp_path / ".bashrc").write_text("alias ll='ls -l'")  # no final newline
    assert install(tmp_path).returncode == 0
    assert (tmp_path / ".bashrc").read_text().splitlines() == [
        "alias ll='ls -l'", f"source '{tmp_path / '.bash_completions' / f'{CTL}.sh'}'"]


def test_zsh_is_installed_where_zsh_looks(tmp_path: Path) -> None:
    done = install(tmp_path, "zsh")
    assert done.returncode == 0 and f"zsh completion installed in {tmp_path / '.zfunc' / f'_{CTL}'}" in done.stdout
    assert (tmp_path / ".zfunc" / f"_{CTL}").read_text().startswith(f"#compdef {CTL}\n")
    assert "fpath+=~/.zfunc; autoload -Uz compinit; compinit" in (tmp_path / ".zshrc").read_text().splitlines()


@pytest.mark.skipif(ZSH is None, reason="zsh is not installed")
def test_zsh_completes_from_the_installed_function(tmp_path: Path) -> None:
    """zsh loads the installed file from fpath as the completion function (compadd and _files stand in
    for the completion system's: what they are handed is what zsh would offer)."""
    done = subprocess.run([str(ZSH), "-f", "-c", f"{CTL} --install-completion; :"], capture_output=True, text=True,
                          env=environment(tmp_path), timeout=60)
    assert done.returncode == 0 and "zsh completion installed" in done.stdout, done

    def offered(*words: str) -> list[str]:
        line = " ".join(words)
        script = ("fpath=(~/.zfunc $fpath); autoload -Uz _nvml-mock-ctl; "
                  "compadd() { local -a a; a=(\"$@\"); print -rl -- \"${(@)a[${a[(i)--]}+1,-1]}\" }; "
                  "_files() { print '<files>' }; "
                  f"BUFFER={shlex.quote(line)}; CURSOR=${{#BUFFER}}; words=({' '.join(map(shlex.quote, words))}); "
                  f"PREFIX={shlex.quote(words[-1])}; _nvml-mock-ctl")
        run = subprocess.run([str(ZSH), "-f", "-c", script], capture_output=True, text=True,
                             env=environment(tmp_path), timeout=60)
        assert run.returncode == 0, run.stderr
        return [word for word in run.stdout.splitlines() if word]

    assert offered(CTL, "fa") == ["fabric-health", "fail", "fail-surface"]
    assert offered(CTL, "set", "0", "fan.sp") == ["fan.speed_percent="]
    assert offered(CTL, "temp", "0", "") == ["<files>"]  # nothing offered: zsh completes file names


def test_a_shell_without_completion_is_refused_by_name(tmp_path: Path) -> None:
    done = subprocess.run([str(BIN / CTL), "--install-completion", "fish"], capture_output=True, text=True,
                          env=environment(tmp_path), timeout=60)
    assert done.returncode == 2 and "invalid choice: 'fish'" in done.stderr
    assert not (tmp_path / ".bashrc").exists()


def test_show_completion_prints_the_script_for_the_shell_it_runs_in(tmp_path: Path) -> None:
    done = subprocess.run([str(BASH), "--norc", "-c", f"{CTL} --show-completion; :"], capture_output=True, text=True,
                          env=environment(tmp_path), timeout=60)
    assert done.returncode == 0 and f"complete -o default -F _nvml_mock_ctl_completion {CTL}\n" in done.stdout, done
    assert not (tmp_path / ".bashrc").exists()


def test_verbs_and_options_complete_from_the_parser(tmp_path: Path) -> None:
    assert completions(f"{CTL} fa", tmp_path) == ["fabric-health", "fail", "fail-surface"]
    assert completions(f"{CTL} re", tmp_path) == ["remapped-rows", "reset"]
    assert completions(f"{CTL} --sh", tmp_path) == ["--show-completion"]
    assert completions(f"{CTL} ecc 0 --un", tmp_path) == ["--uncorrectable"]
    assert completions(f"{CTL} remapped-rows 0 --no-p", tmp_path) == ["--no-pending"]
    assert completions(f"{CTL} --install-completion ", tmp_path) == ["bash", "zsh"]
    assert completions(f"{CTL} nosuchverb ", tmp_path) == []


def test_values_complete_from_the_verbs_own_names(tmp_path: Path) -> None:
    assert completions(f"{CTL} enable fa", tmp_path) == ["fabricmanager"]
    assert completions(f"{CTL} fail-surface i", tmp_path) == ["ib", "imex"]
    assert completions(f"{CTL} fail 0 ", tmp_path) == ["ecc-uncorrectable", "fallen-off-bus", "healthy", "lost"]
    assert completions(f"{CTL} throttle 0 thermal hw_t", tmp_path) == ["hw_thermal", "hw_thermal_slowdown"]
    assert "thermal" not in completions(f"{CTL} throttle 0 thermal ", tmp_path)  # given already
    assert completions(f"{CTL} fabric-health 0 route", tmp_path) == ["route_recovery", "route_unhealthy"]
    assert completions(f"{CTL} mig 0 ", tmp_path) == ["create", "destroy", "list", "off", "on"]
    assert completions(f"{CTL} temp 0 ", tmp_path) == []  # a number: nothing to offer


def test_set_completes_profile_keys_a_level_at_a_time(tmp_path: Path) -> None:
    assert completions(f"{CTL} set 0 fa", tmp_path) == ["fabric.", "failure.", "fan."]
    assert completions(f"{CTL} set 0 fan.sp", tmp_path) == ["fan.speed_percent="]
    assert completions(f"{CTL} set 0 fan.speed_percent=70 thermal.temperature_gpu", tmp_path) == [
        "thermal.temperature_gpu_c="]
    # after the =, bash's word is the value alone: nothing completes a YAML value
    assert completions(f"{CTL} set 0 fan.speed_percent=", tmp_path,
                       words=[CTL, "set", "0", "fan.speed_percent", "="]) == []


def test_gpu_targets_come_from_the_node_the_line_names(tmp_path: Path) -> None:
    root = tmp_path / "root"
    assert completions(f"{CTL} --root {root} temp ", tmp_path) == ["all"]  # no node there
    with recording_node(root) as relayed:
        gpus = snapshot.load(root).node().gpus  # type: ignore[union-attr]
        assert completions(f"{CTL} --root {root} temp ", tmp_path) == ["0", "1", "all"]
        assert completions(f"{CTL} temp ", tmp_path, MOKKA_ROOT=str(root)) == ["0", "1", "all"]
        assert completions(f"{CTL} reset --root {root} a", tmp_path) == ["all"]
        assert completions(f"{CTL} --root={root} mig ", tmp_path,
                           words=[CTL, "--root", "=", str(root), "mig", ""]) == ["0", "1", "all"]
        assert completions(f"{CTL} --root {root} xid GPU-", tmp_path) == sorted(gpu.uuid for gpu in gpus)
        (root / SNAPSHOT).unlink()  # stale or gone: the node's files say the same
        assert completions(f"{CTL} --root {root} power ", tmp_path) == ["0", "1", "all"]
        assert relayed == []  # completing never hands anything to the daemon


def test_install_runs_here_even_where_a_daemon_listens(tmp_path: Path) -> None:
    root, home = tmp_path / "root", tmp_path / "home"
    home.mkdir()
    with recording_node(root) as relayed:
        done = subprocess.run([str(BIN / CTL), "--root", str(root), "--install-completion", "bash"],
                              capture_output=True, text=True, env=environment(home), timeout=60)
        assert done.returncode == 0, done
        assert relayed == []
    assert (home / ".bash_completions" / f"{CTL}.sh").is_file()


def test_every_positional_of_every_verb_completes_or_is_free() -> None:
    """A new verb's argument either completes (choices, or a metavar of VALUES) or is named free here."""
    parser = build_parser()
    verbs = next(action for action in parser._actions if action.dest == "verb").choices
    assert verbs is not None
    assert candidates(f"{CTL} ") == sorted(verbs)
    unknown = [f"{name} {action.metavar}" for name, sub in verbs.items() for action in sub._actions
               if not action.option_strings and action.choices is None
               and action.metavar not in VALUES and action.metavar not in FREE]
    assert not unknown, f"positionals without completion: {', '.join(unknown)}"


def test_an_open_quote_still_completes() -> None:
    assert candidates(f"{CTL} set 0 'fan.sp") == ["fan.speed_percent="]
