"""Every profile key is documented (description, unit), and docs/profile.md is what the models say."""

from __future__ import annotations

import json
import re
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

from mokka_core.cli.mokka import app, profile_app
from mokka_core.errors import ConfigError
from mokka_core.schema import reference
from mokka_core.schema.profile import Profile

DOCS = Path(__file__).resolve().parents[3] / "docs" / "profile.md"
#: a key named like this states its unit
UNIT_SUFFIXES = {"_bytes": "bytes", "_mw": "mW", "_mj": "mJ", "_c": "°C", "_mhz": "MHz", "_us": "µs", "_ms": "ms",
                 "_sec": "s", "_kbps": "KB/s", "_mbps": "MB/s", "_gbps": "Gb/s", "_mib": "MiB", "_gb": "GB",
                 "_percent": "%", "_mib_per_sec": "MiB/s"}


def models(model: type[BaseModel] = Profile, seen: set[type[BaseModel]] | None = None) -> set[type[BaseModel]]:
    seen = set() if seen is None else seen
    seen.add(model)
    for field in model.model_fields.values():
        stack = [field.annotation]
        while stack:
            annotation = stack.pop()
            stack += typing.get_args(annotation)
            if isinstance(annotation, type) and issubclass(annotation, BaseModel) and annotation not in seen:
                models(annotation, seen)
    return seen


def test_every_profile_key_has_a_description() -> None:
    undocumented = [f"{model.__name__}.{name}" for model in models() for name, field in model.model_fields.items()
                    if not (field.description or "").strip()]
    assert undocumented == []


def test_every_key_named_for_a_unit_states_it() -> None:
    wrong = []
    for key in reference.all_keys():
        leaf = key.path.rsplit(".", 1)[-1]
        suffix = max((s for s in UNIT_SUFFIXES if leaf.endswith(s)), key=len, default=None)
        if suffix is not None and key.unit != UNIT_SUFFIXES[suffix]:
            wrong.append((key.path, key.unit))
    assert wrong == []


def test_the_json_schema_carries_the_descriptions() -> None:
    schema = json.loads(CliRunner().invoke(app, ["profile", "schema"]).stdout)
    power = schema["$defs"]["Power"]["properties"]["default_limit_mw"]
    assert power["description"] == "Default power limit (700000 for H100 SXM5). Unit: mW; also 700W, 450.5W."
    assert {"type": "string"} in power["anyOf"]  # the human forms are valid in an editor too
    bare = [f"{name}.{prop}" for name, model in schema["$defs"].items()
            for prop, spec in model.get("properties", {}).items() if not spec.get("description")]
    assert bare == []


def test_docs_profile_md_is_up_to_date() -> None:
    if not DOCS.exists():
        pytest.skip("not in the repository (docs/ is not packaged)")
    assert DOCS.read_text(encoding="utf-8") == reference.markdown(), (
        "docs/profile.md is stale: run `mokka profile docs > docs/profile.md`")


def test_the_reference_lists_every_key_once_with_its_readers() -> None:
    keys = reference.all_keys()
    paths = [key.path for key in keys]
    assert len(paths) == len(set(paths))
    assert "device_defaults.thermal.temperature_gpu_c" in paths and "devices[].uuid" in paths
    assert "devices[].thermal" not in paths  # devices[] entries take device_defaults' keys, listed once
    assert all(key.readers for key in keys)
    by_path = {key.path: key for key in keys}
    assert by_path["infiniband.rate_gbps"].readers.startswith("ib:")
    assert by_path["device_defaults.failure.after_calls"].readers.startswith("gpu: each process's NVML")


def test_describe_prints_description_type_default_unit_and_an_example() -> None:
    result = CliRunner().invoke(app, ["profile", "describe", "device_defaults.power.default_limit_mw"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "device_defaults.power.default_limit_mw",
        "  Default power limit (700000 for H100 SXM5).",
        "  type:    int (>= 0) or 700W, 450.5W",
        "  default: required",
        "  unit:    mW",
        "  read by: gpu: nvidia-smi, pynvml (the NVML state file)",
        "  example: default_limit_mw: 700000   (h100.yaml)",
    ]


def test_describe_takes_list_indices_and_device_entries() -> None:
    assert reference.describe("devices[3].pci.bus_id").path == "devices[].pci.bus_id"
    assert reference.describe("nvlink.switches[0].bdf").path == "nvlink.switches[].bdf"
    assert reference.describe("devices[0].thermal.temperature_gpu_c").unit == "°C"


def test_describe_of_an_unknown_key_fails_naming_it() -> None:
    result = CliRunner().invoke(app, ["profile", "describe", "device_defaults.powr.limit"])
    assert result.exit_code == 1
    assert "device_defaults.powr.limit: no such profile key" in str(result.exception)


def test_profile_help_promises_only_commands_that_exist() -> None:
    commands = {command.name for command in profile_app.registered_commands}
    assert commands == {"list", "show", "validate", "schema", "describe", "docs", "import", "diff"}
    promised = re.findall(r"\b(list|show|validate|describe|JSON Schema|key reference|import|diff)\b",
                          profile_app.info.help)
    assert set(promised) == {"list", "show", "validate", "describe", "JSON Schema", "key reference", "import", "diff"}
    for command in commands:
        assert CliRunner().invoke(app, ["profile", command, "--help"]).exit_code == 0, command


def test_every_key_is_read_or_refused_none_accepted_and_ignored() -> None:
    keys = reference.all_keys()
    assert not [key.path for key in keys if "not simulated" in key.description or key.readers == "nothing yet"]
    refused = {key.path for key in keys if key.readers.startswith("nobody")}
    assert refused == {"device_defaults.power.power_state", *(f"device_defaults.features.{flag}" for flag in (
        "transformer_engine", "fp4_support", "fp6_support", "fp8_support", "nvlink_c2c", "decompression_engine",
        "fifth_gen_tensor_cores"))}


def test_a_refused_power_state_names_file_key_and_the_key_to_use(write_profile) -> None:
    from mokka_core.schema.loader import load_profile

    path = write_profile(lambda text: text.replace("  power: {", "  power: {power_state: P0, ", 1))
    with pytest.raises(ConfigError, match=rf"{re.escape(str(path))}: device_defaults.power.power_state: refused: .*"
                                          "set performance_state instead"):
        load_profile(path)


@pytest.mark.parametrize("flag", ["fp8_support", "transformer_engine", "nvlink_c2c"])
def test_feature_flags_no_nvml_call_shows_are_refused_naming_file_and_key(write_profile, flag: str) -> None:
    from mokka_core.schema.loader import load_profile

    path = write_profile(lambda text: text.replace("device_defaults:\n", "device_defaults:\n  features: {"
                                                   f"confidential_compute: true, {flag}: false}}\n", 1))
    with pytest.raises(ConfigError) as caught:
        load_profile(path)
    message = str(caught.value)
    assert f"{path}: device_defaults.features.{flag}: refused: " in message
    assert ("nvlink.c2c_enabled" if flag == "nvlink_c2c" else "consumers derive it from the") in message
    fine = write_profile(lambda text: text.replace("device_defaults:\n", "device_defaults:\n  features: "
                                                   "{confidential_compute: true}\n", 1), name="fine.yaml")
    assert load_profile(fine).device_defaults.features.confidential_compute is True


def test_the_built_in_profiles_load_without_a_warning(caplog) -> None:
    from mokka_core.schema.builtin import BUILTIN_PROFILES, builtin_text
    from mokka_core.schema.loader import load_profile_text

    with caplog.at_level("WARNING"):
        for name in BUILTIN_PROFILES:
            load_profile_text(builtin_text(name), f"{name}.yaml")
    assert caplog.records == []


@pytest.mark.parametrize(("system", "expected"), [
    ('{driver_version: "550.1", cuda_version: "12.8"}', (12, 8)),
    ('{driver_version: "550.1", cuda_version: "13.0", cuda_version_major: 13}', (13, 0)),
    ('{driver_version: "550.1"}', (12, 4)),
])
def test_cuda_version_text_sets_major_and_minor(tmp_path: Path, system: str, expected: tuple[int, int]) -> None:
    from mokka_core.schema.loader import load_profile

    path = tmp_path / "p.yaml"
    path.write_text(f'version: "1"\nsystem: {system}\n')
    loaded = load_profile(path).system
    assert (loaded.cuda_version_major, loaded.cuda_version_minor) == expected


@pytest.mark.parametrize(("system", "message"), [
    ('{driver_version: "550.1", cuda_version: "12.x"}', "system: cuda_version must look like 12.4, got '12.x'"),
    ('{driver_version: "550.1", cuda_version: "12.8", cuda_version_minor: 4}',
     "system: cuda_version 12.8 disagrees with cuda_version_minor 4"),
])
def test_bad_cuda_version_text_is_refused_naming_the_key(tmp_path: Path, system: str, message: str) -> None:
    from mokka_core.errors import ConfigError
    from mokka_core.schema.loader import load_profile

    path = tmp_path / "p.yaml"
    path.write_text(f'version: "1"\nsystem: {system}\n')
    with pytest.raises(ConfigError, match=re.escape(f"{path}: {message}")):
        load_profile(path)
