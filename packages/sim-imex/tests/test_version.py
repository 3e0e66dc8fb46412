"""``nvidia-imex --version`` prints what the real daemon prints, with the node's driver version."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from mokka_core.model.spec import NodeSpec
from mokka_core.schema.builtin import builtin_text
from mokka_core.stage import nodefile

DAEMON = [sys.executable, "-m", "mokka_sim_imex.daemon"]


def node_with_driver(root: Path, driver: str) -> None:
    text = builtin_text("gb200")
    profile = root.parent / "profile.yaml"
    profile.write_text(text.replace('driver_version: "580.173.02"', f'driver_version: "{driver}"'))
    assert profile.read_text() != text, "the built-in gb200 profile no longer names driver 580.173.02"
    nodefile.save(root, NodeSpec(profile_file=profile, gpus=4))


def test_version_is_the_real_line_with_the_driver_of_the_node(tmp_path: Path) -> None:
    root = tmp_path / "root"
    node_with_driver(root, "570.148.08")
    done = subprocess.run([*DAEMON, "--version"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "MOKKA_ROOT": str(root)})
    # the real nvidia-imex of driver 570.148.08 (bottlerocket-os/bottlerocket-kernel-kit#204)
    assert (done.returncode, done.stdout, done.stderr) == (0, "IMEX version is: 570.148.08\n", "")
    by_root = subprocess.run([*DAEMON, "--root", str(root), "--version"], capture_output=True, text=True, timeout=60)
    assert by_root.stdout == "IMEX version is: 570.148.08\n"


def test_version_without_a_node_says_so(tmp_path: Path) -> None:
    done = subprocess.run([*DAEMON, "--root", str(tmp_path), "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith(f"nvidia-imex: no simulated node under {tmp_path}")
