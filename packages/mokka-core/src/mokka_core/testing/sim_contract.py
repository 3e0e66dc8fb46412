"""The contract every ``mokka-sim-<name>`` package keeps, as reusable pytest tests.

A sim package's ``tests/test_cli.py`` subclasses :class:`SimContract`, names its
app and surface, and adds only what is specific to it::

    class TestContract(SimContract):
        app = app
        surface = PciSurface
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar

import pytest
import typer
from typer.testing import CliRunner

from ..errors import MokkaError
from ..stage import paths
from ..stage.surface import Surface, discover

runner = CliRunner()


class SimContract:
    app: ClassVar[typer.Typer]
    surface: ClassVar[type[Surface]]
    #: False for surfaces whose ``check`` needs another surface staged beside them (nvlink reads the NVML view)
    checks_alone: ClassVar[bool] = True

    def invoke(self, *args: str, env: dict[str, str] | None = None) -> Any:
        return runner.invoke(self.app, list(args), env=env)

    def test_registered_as_surface(self) -> None:
        assert discover()[self.surface.name] is self.surface

    def test_help_names_every_verb(self) -> None:
        result = self.invoke("--help")
        assert result.exit_code == 0
        for verb in ("stage", "teardown", "serve", "check", "plan"):
            assert verb in result.output

    def test_stage_and_teardown_leave_no_residue(self, tmp_path: Path) -> None:
        root = tmp_path / "root"
        root.mkdir()
        staged = self.invoke("stage", "--root", str(root), "--profile", "h100")
        assert staged.exit_code == 0, staged.output + repr(staged.exception)
        if self.checks_alone:
            checked = self.invoke("check", "--root", str(root), "--profile", "h100")
            assert checked.exit_code == 0, checked.output
        assert self.invoke("teardown", "--root", str(root)).exit_code == 0
        assert list(root.iterdir()) == []

    def test_unknown_profile_is_refused(self) -> None:
        result = self.invoke("plan", "--profile", "h200")
        assert result.exit_code != 0
        assert "available profiles" in str(result.exception) + result.output

    def test_root_comes_from_mokka_root(self, tmp_path: Path) -> None:
        root = tmp_path / "root"
        root.mkdir()
        staged = self.invoke("stage", "--profile", "h100", env={"MOKKA_ROOT": str(root)})
        assert staged.exit_code == 0, staged.output + repr(staged.exception)
        assert list(root.iterdir())
        assert self.invoke("teardown", env={"MOKKA_ROOT": str(root)}).exit_code == 0
        assert list(root.iterdir()) == []

    def test_no_root_is_refused_and_nothing_is_written(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without --root, $MOKKA_ROOT or a cluster node, / is never assumed: it takes --root / to mean it."""
        monkeypatch.delenv("MOKKA_ROOT", raising=False)
        monkeypatch.setattr(paths, "CLUSTER_ROOT", tmp_path / "no-cluster-node")
        monkeypatch.chdir(tmp_path)
        before = {p: sorted(os.listdir(p)) for p in ("/", f"/{paths.STATE_DIR}") if os.path.isdir(p)}
        for verb in ("stage", "check", "teardown", "serve"):
            result = self.invoke(verb, *(["--profile", "h100"] if verb != "teardown" else []))
            assert result.exit_code != 0, verb
            assert isinstance(result.exception, MokkaError), (verb, result.output, result.exception)
            assert "no node root: give --root DIR" in str(result.exception)
        assert {p: sorted(os.listdir(p)) for p in before} == before
        assert list(tmp_path.iterdir()) == []
