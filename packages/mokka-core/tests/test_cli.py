"""The mokka CLI: profiles, schema, and the resolved node."""

import json

import pytest
from typer.testing import CliRunner

from mokka_core.cli.mokka import EXIT_AT_ONCE, app, narrowed

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


def _every_invocation() -> list[list[str]]:
    names = [info.name for info in app.registered_commands] + [info.name for info in app.registered_groups]
    assert "run" in names and "node" in names
    forms: list[list[str]] = []
    for name in names:
        assert name is not None
        # run and shim take an unknown option as the start of CMD (it would run): a bad value errs instead
        wrong = [name, "--gpus", "x", "--", "true"] if name in EXIT_AT_ONCE else [name, "--no-such-option"]
        forms += [[name, "--help"], wrong, ["--version", name]]
    forms += [["node", "up", "--help"], ["node", "nosuch"], ["profile", "show", "h100"], ["show", "--gpus", "x"],
              ["run", "--profile", "h100"], ["--help"], [], ["nosuch"], ["ru"]]
    return forms


@pytest.mark.parametrize("args", _every_invocation(), ids=" ".join)
def test_a_narrowed_app_parses_errs_and_helps_as_the_whole_one(args: list[str]) -> None:
    # mokka's main builds only the command it is given (typer builds every command's options first)
    whole = runner.invoke(app, args, prog_name="mokka")
    alone = runner.invoke(narrowed(app, args), args, prog_name="mokka")
    assert (alone.exit_code, alone.output) == (whole.exit_code, whole.output)


def test_narrowing_keeps_only_the_named_command() -> None:
    only = narrowed(app, ["run", "--profile", "h100", "--", "true"])
    assert [info.name for info in only.registered_commands] == ["run"] and not only.registered_groups
    assert [info.name for info in narrowed(app, ["node", "up"]).registered_groups] == ["node"]
    assert narrowed(app, ["--help"]) is app and narrowed(app, ["nosuch"]) is app
    assert len(app.registered_commands) > 1  # the whole app is left as it was
