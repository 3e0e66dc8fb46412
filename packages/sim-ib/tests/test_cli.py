"""The package installs, registers its surface, and its CLI explains itself."""

from pathlib import Path

from typer.testing import CliRunner

from mokka_core.testing.examples import Running, run_example, typer_examples
from mokka_core.testing.sim_contract import SimContract
from mokka_core.testing.waiting import wait_for
from mokka_sim_ib.cli import app
from mokka_sim_ib.surface import IbSurface


class TestContract(SimContract):
    app = app
    surface = IbSurface
    own_examples = frozenset({"respond", "exec"})  # run below: they need a staged node, the shim and the tools


def test_the_respond_and_exec_examples_run(ib_tools: Path, tmp_path: Path) -> None:
    """As --help shows them: a staged node, its responder in the foreground, a real tool on it."""
    examples = typer_examples(app)
    root = tmp_path / "root"
    root.mkdir()
    assert CliRunner().invoke(app, ["stage", "--root", str(root), "--profile", "h100"]).exit_code == 0
    responder = Running(examples[("respond",)], root, tmp_path)
    try:
        wait_for(lambda: responder.said("serving"), what="the respond example serving")
        run_example(examples[("exec",)], root, tmp_path)
    finally:
        responder.stop()

