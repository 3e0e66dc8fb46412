"""Every example ``mokka --help`` and ``nvml-mock-ctl --help`` show is real: taken from the help text and run,
it exits 0 (each sim's are run by its contract: ``SimContract.test_every_help_example_runs``).

``/tmp/node`` in an example becomes a temporary root; ``nvml-mock-ctl`` examples (which name no
root) run with ``$MOKKA_ROOT`` at the node ``mokka node up``'s example started, which runs until
ready and must stop with 0 once ``mokka node down``'s example has run.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from mokka_core.cli.mokka import app as mokka_app
from mokka_core.testing.consumers import apt_tool, missing
from mokka_core.testing.examples import BIN, Running, commands, ctl_examples, run_example, typer_examples
from mokka_core.testing.waiting import wait_for

REPO = Path(__file__).resolve().parents[3]
MOKKA = typer_examples(mokka_app)


def test_the_examples_are_found() -> None:
    """The extraction can fail: it finds what the help texts show."""
    assert MOKKA[("node", "up")] == "mokka node up --profile h100 --gpus 8 --root /tmp/node"
    assert set(MOKKA) == {("run",), ("shim",), ("node", "up"), ("node", "status"), ("node", "logs"),
                          ("node", "down"), ("profile", "import"), ("profile", "diff")}
    ctl = ctl_examples()
    assert "nvml-mock-ctl enable imex" in ctl and len(ctl) >= 20
    assert commands(ctl[0], Path("/r"))[0][1:] == ["fail", "3", "fallen-off-bus"]
    assert [argv[1:3] for argv in commands("nvml-mock-ctl mig 0 on; nvml-mock-ctl mig 0 destroy all # x",
                                          Path("/r"))] == [["mig", "0"], ["mig", "0"]]


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """Where the examples run: relative paths in them (reference/captures/...) are the repository's."""
    cwd = tmp_path / "work"
    cwd.mkdir()
    (cwd / "reference").symlink_to(REPO / "reference")
    return cwd


def test_the_profile_import_example_runs(work: Path, tmp_path: Path) -> None:
    run_example(MOKKA[("profile", "import")], tmp_path / "root", work)


@pytest.mark.consumer
def test_the_profile_diff_example_runs(work: Path, tmp_path: Path, whole_node: None) -> None:
    """It runs real nvidia-smi on the profile's node: every surface installed (tox -e e2e)."""
    fetch_nvidia_smi()
    run_example(MOKKA[("profile", "diff")], tmp_path / "root", work)


def fetch_nvidia_smi() -> None:
    """What `make setup` does; staging itself never downloads."""
    from mokka_core.stage import nvidia_smi

    try:
        nvidia_smi.fetch("550")
    except nvidia_smi.FetchFailed as exc:
        missing(f"Debian's nvidia-smi 550: {exc}")


@pytest.mark.consumer
@pytest.mark.parametrize("command", [("run",), ("shim",)])
def test_the_run_and_shim_examples_run(command: tuple[str, ...], work: Path, tmp_path: Path, whole_node: None) -> None:
    if command == ("run",):
        if os.geteuid() != 0:
            missing("mokka run's example stages the node at the real paths (root; CI runs as root)")
        fetch_nvidia_smi()
    else:
        apt_tool("lspci", "pciutils")
    run_example(MOKKA[command], tmp_path / "root", work)


@pytest.mark.e2e
def test_the_node_and_ctl_examples_run_on_the_node_they_start(work: Path, tmp_path: Path, whole_node: None) -> None:
    root = tmp_path / "root"
    root.mkdir()
    node = Running(MOKKA[("node", "up")], root, work)
    try:
        ready = [str(BIN / "mokka"), "node", "status", "--ready", "--root", str(root)]
        wait_for(lambda: subprocess.run(ready, capture_output=True).returncode == 0 or node.process.poll() is not None,
                 timeout=60, what="the node up example ready")
        assert node.process.poll() is None, "".join(node.lines)
        run_example(MOKKA[("node", "status")], root, work)
        run_example(MOKKA[("node", "logs")], root, work)
        for example in ctl_examples():
            run_example(example, root, work, env={"MOKKA_ROOT": str(root)})
        run_example(MOKKA[("node", "down")], root, work)
    finally:
        node.stop()
