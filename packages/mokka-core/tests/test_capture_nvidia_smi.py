"""Fidelity against the real captures, seen by real nvidia-smi ``-q -x`` on a staged node (``mokka profile diff``).

Needs the gpu surface installed (``tox -e e2e``) and Debian's nvidia-smi, which the tests fetch.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mokka_core.model.spec import NodeSpec
from mokka_core.schema.capture.compare import compare
from mokka_core.schema.capture.facts import parse_capture, read_capture
from mokka_core.schema.capture.importer import import_profile
from mokka_core.stage import nvidia_smi
from mokka_core.testing.consumers import missing

pytestmark = pytest.mark.consumer

CAPTURES = Path(__file__).resolve().parents[3] / "reference" / "captures"
BOARDS = ("a100", "h100", "b200", "gb200", "gb300", "l40s", "t4")
#: the issue's bar: matched / comparable model facts
FIDELITY = 0.95
@pytest.fixture(autouse=True)
def nvidia_smi_cached(whole_node: None) -> None:
    for branch in nvidia_smi.SUITES:
        try:
            nvidia_smi.fetch(branch)  # what `make setup` does; staging itself never downloads
        except nvidia_smi.FetchFailed as exc:
            missing(f"Debian's nvidia-smi {branch}: {exc}")


def simulated(spec: NodeSpec):
    from mokka_core.cli.capture import simulated_capture

    return parse_capture(simulated_capture(spec), "simulated")


@pytest.mark.parametrize("board", BOARDS)
def test_an_imported_capture_twins_the_real_node(tmp_path: Path, board: str) -> None:
    capture = read_capture(CAPTURES / f"qx-{board}.xml")
    path = tmp_path / f"{board}-twin.yaml"
    path.write_text(import_profile(capture).yaml())
    result = compare(capture, simulated(NodeSpec(profile_file=path)))
    assert result.gpus_compared == capture.gpu_count
    assert result.score >= FIDELITY, "\n".join(
        [result.score_line()] + [f"{d.where}: {d.captured!r} != {d.simulated!r}" for d in result.differences])


def test_the_built_in_profiles_reproduce_their_captures() -> None:
    matched = comparable = 0
    lines = []
    for board in BOARDS:
        result = compare(read_capture(CAPTURES / f"qx-{board}.xml"), simulated(NodeSpec(profile=board)))
        matched, comparable = matched + result.matched, comparable + result.comparable
        lines.append(f"{board}: {result.score_line()}")
    assert matched >= FIDELITY * comparable, "\n".join(lines)


@pytest.mark.parametrize("branch", list(nvidia_smi.SUITES))
def test_every_nvidia_smi_branchs_document_imports_back_to_the_same_node(tmp_path: Path, branch: str) -> None:
    """535, 550 and 555 name elements differently: each one's -q -x of a node imports into that node."""
    from mokka_core import Node

    with Node("a100") as node:
        done = subprocess.run([str(nvidia_smi.fetch(branch)), "-q", "-x"], env=node.env, capture_output=True,
                              text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    capture = parse_capture(done.stdout, f"a100 by nvidia-smi {branch}")
    path = tmp_path / "again.yaml"
    path.write_text(import_profile(capture).yaml())
    result = compare(capture, simulated(NodeSpec(profile_file=path)))
    assert (result.gpus_compared, result.differences) == (8, ()), result.score_line()
    assert result.matched > 8 * 70


def test_diff_reports_each_difference_and_the_score() -> None:
    capture = str(CAPTURES / "qx-t4.xml")
    done = subprocess.run([sys.executable, "-m", "mokka_core", "profile", "diff", capture, "--profile", "t4"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"{capture}: 1 GPUs captured, 1 simulated (profile t4); GPU i compared with GPU i for 1"
    assert lines[-1].startswith("fidelity ") and lines[-2].startswith("not comparable: ")
    real = read_capture(CAPTURES / "qx-t4.xml")
    assert f"  driver_version: capture '{real.node['driver_version']}', simulated '550.163.01'" in lines
    done = subprocess.run([sys.executable, "-m", "mokka_core", "profile", "diff", capture, "--profile", "t4", "--json"],
                          capture_output=True, text=True, timeout=120)
    report = json.loads(done.stdout)
    assert report["comparable"] == report["matched"] + len(report["differences"])
    assert f"fidelity {report['matched']}/{report['comparable']} " in lines[-1]
    assert {"path": "driver_version", "gpu": None, "capture": real.node["driver_version"],
            "simulated": "550.163.01"} in report["differences"]


def test_diff_says_clearly_when_no_nvidia_smi_is_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOKKA_CACHE", str(tmp_path / "empty-cache"))
    done = subprocess.run([sys.executable, "-m", "mokka_core", "profile", "diff", str(CAPTURES / "qx-t4.xml"),
                           "--profile", "t4"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "no nvidia-smi for driver branch 550" in done.stderr
    assert "run `mokka fetch nvidia-smi 550`" in done.stderr
