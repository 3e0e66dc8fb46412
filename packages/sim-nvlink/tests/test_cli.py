"""The package installs, registers its surface, and its CLI explains itself."""

from typer.testing import CliRunner

from mokka_core.surface import discover
from mokka_sim_nvlink.cli import app
from mokka_sim_nvlink.surface import NvlinkSurface

runner = CliRunner()


def test_registered_as_surface() -> None:
    assert discover()["nvlink"] is NvlinkSurface


def test_help_names_every_verb() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for verb in ("stage", "teardown", "serve", "check", "plan"):
        assert verb in result.output


def test_stage_and_teardown_leave_no_residue(tmp_path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    assert runner.invoke(app, ["stage", "--root", str(root), "--profile", "h100"]).exit_code == 0
    # NVLink is NVML-only: nothing staged, and without the gpu surface's NVML view there is nothing to show it
    check = runner.invoke(app, ["check", "--root", str(root), "--profile", "h100"])
    assert check.exit_code == 1
    assert "mokka-nvml.state is missing (the gpu surface stages it)" in check.output
    assert runner.invoke(app, ["teardown", "--root", str(root)]).exit_code == 0
    assert list(root.iterdir()) == []


def test_unknown_profile_is_refused() -> None:
    result = runner.invoke(app, ["plan", "--profile", "h200"])
    assert result.exit_code != 0
    assert "available profiles" in str(result.exception) + result.output
