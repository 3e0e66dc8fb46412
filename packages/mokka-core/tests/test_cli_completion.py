"""Shell completion, installed the way typer installs it and used by a real bash."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
SIMS = ["gpu", "pci", "cdi", "imex", "nvlink", "fabricmanager", "ib"]
BASH = shutil.which("bash")

pytestmark = pytest.mark.skipif(BASH is None, reason="bash is not installed")


def completions(program: str, words: list[str], home: Path) -> list[str]:
    """What bash offers for ``program words...`` with the completion ``--install-completion`` installed."""
    env = {**os.environ, "HOME": str(home), "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    # from a bash, as people type it: typer detects the shell it runs in
    installed = subprocess.run([str(BASH), "--norc", "-c", f"{program} --install-completion"], capture_output=True,
                               text=True, env=env, timeout=60)
    assert installed.returncode == 0 and "bash completion installed" in installed.stdout, installed
    line = " ".join([program, *words])
    script = (f"source ~/.bashrc; COMP_WORDS=({line}); COMP_CWORD={len(words)}; "
              f"$(complete -p {program} | sed 's/.*-F \\([^ ]*\\) .*/\\1/') {program}; "
              "printf '%s\\n' \"${COMPREPLY[@]}\"")
    done = subprocess.run([str(BASH), "--norc", "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_mokka_completes_commands_profiles_and_surfaces(tmp_path: Path) -> None:
    assert completions("mokka", ["no"], tmp_path) == ["node"]
    assert completions("mokka", ["node", "l"], tmp_path) == ["logs"]
    assert completions("mokka", ["run", "--profile", "h"], tmp_path) == ["h100", "h200"]
    assert completions("mokka", ["run", "--disable", "fa"], tmp_path) == ["fabricmanager"]


def test_node_logs_completes_the_sources_of_the_node_named(tmp_path: Path) -> None:
    from mokka_core.stage.store import NodeStore

    root = tmp_path / "root"
    NodeStore(root).log_dir.mkdir(parents=True)
    NodeStore(root).service_log("nv-fabricmanager").write_text("")
    assert completions("mokka", ["node", "logs", "--root", str(root), "nv"], tmp_path) == ["nv-fabricmanager"]
    assert completions("mokka", ["node", "logs", "--root", str(root), "mokka"], tmp_path) == ["mokka-node"]


@pytest.mark.parametrize("sim", SIMS)
def test_each_sim_completes_its_commands(sim: str, tmp_path: Path) -> None:
    program = f"mokka-sim-{sim}"
    if not (BIN / program).exists():
        pytest.skip(f"{program} is not installed")
    assert completions(program, ["st"], tmp_path) == ["stage"]
    assert completions(program, ["stage", "--prof"], tmp_path) == ["--profile", "--profile-file"]


def test_show_completion_prints_the_script_for_the_shell_it_runs_in() -> None:
    done = subprocess.run([str(BASH), "--norc", "-c", f"{BIN / 'mokka'} --show-completion"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and "complete -o default -F _mokka_completion mokka" in done.stdout, done
