"""Profiles: the built-ins load, and bad input names the file, the key path and the value."""

from pathlib import Path

import pytest

from mokka_core.errors import ConfigError
from mokka_core.schema.builtin import BUILTIN_PROFILES, load_builtin
from mokka_core.schema.loader import load_override, load_profile, load_profile_text


@pytest.mark.parametrize("name", BUILTIN_PROFILES)
def test_builtin_profiles_load(name: str) -> None:
    profile = load_builtin(name)
    assert profile.name == name
    defaults = profile.device_defaults
    assert defaults.name and defaults.memory and defaults.pci and defaults.power and defaults.thermal
    assert defaults.pci.device_id & 0xFFFF == 0x10DE
    assert defaults.memory.total_bytes > 10 * 2**30


def test_real_board_values() -> None:
    h100 = load_builtin("h100")
    assert h100.device_defaults.name == "NVIDIA H100 80GB HBM3"
    assert h100.device_defaults.pci.device_id == 0x233010DE
    assert h100.device_defaults.pcie.max_link_gen == 5
    assert h100.nvlink.links_per_gpu == 18 and h100.nvlink.version == 4
    assert load_builtin("a100").nvlink.links_per_gpu == 12
    assert load_builtin("t4").device_defaults.name == "Tesla T4"
    assert load_builtin("gb200").system.num_devices == 4
    assert load_builtin("l40s").nvlink is None


def expect_error(path: Path, key: str, fragment: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_profile(path)
    message = str(info.value)
    assert message.startswith(str(path)), message
    assert key in message and fragment in message, message
    return info.value


def test_wrong_type(write_profile) -> None:
    path = write_profile(lambda t: t.replace("num_gpu_cores: 16896", "num_gpu_cores: lots"))
    expect_error(path, "device_defaults.num_gpu_cores", "'lots'")


def test_negative_memory(write_profile) -> None:
    path = write_profile(lambda t: t.replace("total_bytes: 85520809984", "total_bytes: -1"))
    expect_error(path, "device_defaults.memory.total_bytes", "-1")


def test_free_larger_than_total(write_profile) -> None:
    too_much = "free_bytes: 99999999999999, memory_bus_width"
    path = write_profile(lambda t: t.replace("used_bytes: 0, memory_bus_width", too_much))
    expect_error(path, "device_defaults.memory", "must not exceed total_bytes")


def test_unknown_architecture(write_profile) -> None:
    path = write_profile(lambda t: t.replace("architecture: hopper", "architecture: rubin"))
    expect_error(path, "device_defaults.architecture", "'rubin'")


def test_duplicate_device_index(write_profile) -> None:
    path = write_profile(lambda t: t.replace("{index: 1,", "{index: 0,"))
    expect_error(path, "devices", "device index 0 appears more than once")


def test_bus_id_format(write_profile) -> None:
    path = write_profile(lambda t: t.replace('"0000:43:00.0"', '"43:00"'))
    expect_error(path, "devices[1].pci.bus_id", "'43:00'")


def test_count_zero(write_profile) -> None:
    path = write_profile(lambda t: t.replace("num_devices: 8", "num_devices: 0"))
    expect_error(path, "system.num_devices", "0")


def test_yaml_syntax_error_has_line(write_profile) -> None:
    path = write_profile(lambda t: t.replace("  driver_version:", "  driver_version: [", 1))
    error = expect_error(path, "YAML syntax error", "line")
    assert "line 1" not in str(error)


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("")
    expect_error(path, "", "file is empty")


def test_unknown_key_in_profile_is_a_warning(write_profile, caplog) -> None:
    path = write_profile(lambda t: t.replace("  num_gpu_cores: 16896", "  num_gpu_cores: 16896\n  sparkle: true"))
    profile = load_profile(path)
    assert profile.device_defaults.num_gpu_cores == 16896
    assert f"{path}: device_defaults.sparkle: unknown key ignored" in caplog.text  # names the file and the path


def test_unknown_key_in_override_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "overrides.yaml"
    path.write_text("version: 1\nall:\n  thermal: {temperature_gpu_c: 50, sparkle: 1}\n")
    with pytest.raises(ConfigError, match=r"overrides.yaml: all.thermal.sparkle: unknown key"):
        load_override(path)


def test_override_device_keys_are_indices(tmp_path: Path) -> None:
    path = tmp_path / "overrides.yaml"
    path.write_text("devices:\n  first: {performance_state: P2}\n")
    with pytest.raises(ConfigError, match="decimal GPU indices"):
        load_override(path)


def test_every_problem_is_reported_at_once(write_profile) -> None:
    path = write_profile(
        lambda t: t.replace("architecture: hopper", "architecture: rubin").replace(
            "total_bytes: 85520809984", "total_bytes: -5"
        )
    )
    error = expect_error(path, "architecture", "rubin")
    assert len(error.problems) == 2


def test_upstream_style_profile_loads() -> None:
    """A profile in the Go mock's shape (explicit uuids, hex strings, extra blocks) loads unchanged."""
    text = """
version: "1.0"
system: {driver_version: "550.163.01", nvml_version: "12.550.163.01", cuda_version_major: 12, cuda_version_minor: 4}
device_defaults:
  name: "NVIDIA A100-SXM4-40GB"
  architecture: ampere
  pci: {device_id: "0x20B010DE", subsystem_id: "0x134710DE"}
  memory: {total_bytes: 42949672960, free_bytes: 42949672960, used_bytes: 0}
  fan: {count: 0, speed_percent: "N/A"}
devices:
  - {index: 0, uuid: "GPU-12345678-1234-1234-1234-123456780000", minor_number: 0, pci: {bus_id: "0000:07:00.0"}}
  - {index: 1, uuid: "GPU-12345678-1234-1234-1234-123456780001", minor_number: 1, pci: {bus_id: "0000:0F:00.0"}}
dynamic_metrics_defaults: {power: {base_mw: 250000, variance_mw: 25000}}
"""
    profile = load_profile_text(text, "gpu-profile-a100/profile.yaml")
    assert profile.devices[1].pci.bus_id == "0000:0f:00.0"
    assert profile.device_defaults.pci.device_id == 0x20B010DE
