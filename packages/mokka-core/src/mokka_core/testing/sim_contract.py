"""The contract every ``mokka-sim-<name>`` package keeps, as reusable pytest tests.

A sim package's ``tests/test_cli.py`` subclasses :class:`SimContract`, names its
app and surface, and adds only what is specific to it::

    class TestContract(SimContract):
        app = app
        surface = PciSurface
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import typer
from typer.testing import CliRunner

from ..stage.surface import Surface, discover

runner = CliRunner()


class SimContract:
    app: ClassVar[typer.Typer]
    surface: ClassVar[type[Surface]]
    #: False for surfaces whose ``check`` needs another surface staged beside them (nvlink reads the NVML view)
    checks_alone: ClassVar[bool] = True

    def invoke(self, *args: str) -> Any:
        return runner.invoke(self.app, list(args))

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
