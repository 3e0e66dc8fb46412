"""The mokka CLI: profiles, schema, and the resolved node."""

import json

from typer.testing import CliRunner

from mokka_core.cli.mokka import app

runner = CliRunner()


def test_profile_list_names_every_built_in() -> None:
    result = runner.invoke(app, ["profile", "list"])
    assert result.exit_code == 0
    for name in ("a100", "h100", "h200", "b200", "gb200", "gb300", "l40s", "l4", "a10g", "t4"):
        assert name in result.output


def test_profile_show_roundtrips_through_validate(tmp_path) -> None:
    shown = runner.invoke(app, ["profile", "show", "gb200"])
    path = tmp_path / "mine.yaml"
    path.write_text(shown.output)
    result = runner.invoke(app, ["profile", "validate", str(path)])
    assert result.exit_code == 0 and "ok (NVIDIA GB200)" in result.output


def test_validate_bad_file_exits_1(tmp_path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("version: '1.0'\nsystem: {driver_version: 'x'}\n")
    result = runner.invoke(app, ["profile", "validate", str(path)])
    assert result.exit_code == 1
    assert "system.driver_version" in result.output


def test_schema_is_json_schema() -> None:
    schema = json.loads(runner.invoke(app, ["profile", "schema"]).output)
    assert "device_defaults" in schema["properties"]


def test_show_table_and_json() -> None:
    result = runner.invoke(app, ["show", "--profile", "h100", "--gpus", "2", "--fail", "pci"])
    assert result.exit_code == 0
    assert "2 x NVIDIA H100 80GB HBM3" in result.output and "pci=failed" in result.output
    data = json.loads(runner.invoke(app, ["show", "--profile", "t4", "--json"]).output)
    assert data["gpus"][0]["config"]["name"] == "Tesla T4"


def test_help_explains_itself() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0 and "simulator" in result.output
