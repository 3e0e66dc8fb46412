"""The package installs, registers its surface, and its CLI explains itself."""

from typer.testing import CliRunner

from mokka_core.surface import discover
from mokka_sim_gpu.cli import app
from mokka_sim_gpu.surface import GpuSurface

runner = CliRunner()


def test_registered_as_surface() -> None:
    assert discover()["gpu"] is GpuSurface


def test_help_names_every_verb() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for verb in ("stage", "teardown", "serve", "check", "plan"):
        assert verb in result.output


def test_stage_and_teardown_leave_no_residue(tmp_path, native_dir) -> None:
    root = tmp_path / "root"
    root.mkdir()
    assert runner.invoke(app, ["stage", "--root", str(root), "--profile", "h100"]).exit_code == 0
    assert runner.invoke(app, ["check", "--root", str(root), "--profile", "h100"]).exit_code == 0
    assert runner.invoke(app, ["teardown", "--root", str(root)]).exit_code == 0
    assert list(root.iterdir()) == []


def test_stage_without_a_built_library_says_how_to_build_it(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("MOKKA_NATIVE_DIR", str(tmp_path / "nowhere"))
    result = runner.invoke(app, ["stage", "--root", str(tmp_path / "root"), "--profile", "h100"])
    assert result.exit_code != 0
    assert "make -C native install" in str(result.exception) + result.output
    assert not (tmp_path / "root").exists() or list((tmp_path / "root").iterdir()) == []


def test_unknown_profile_is_refused() -> None:
    result = runner.invoke(app, ["plan", "--profile", "h200"])
    assert result.exit_code != 0
    assert "available profiles" in str(result.exception) + result.output
