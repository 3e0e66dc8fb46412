"""What the library would reject never reaches the state file (issue 18, items 6 and 7): the bounds of
native/state-keys.toml refuse a value with a message naming the key and the bound, the override unchanged."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mokka_core.cli.mokka import app
from mokka_core.ctl.cli import execute
from mokka_core.errors import MokkaError
from mokka_core.model.spec import NodeSpec
from mokka_core.schema.builtin import builtin_text
from mokka_core.schema.profile import MAX_GPUS
from mokka_core.stage import nodefile
from mokka_core.stage.nvml_key_lookup import value_problem
from mokka_core.stage.nvml_keys import LIMITS
from mokka_core.stage.nvml_view import render_nvml_state
from mokka_core.stage.store import OVERRIDE_FILE
from mokka_core.testing.runner import NvmlSurface


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    nodefile.save(root, NodeSpec(profile="h100", gpus=2))
    assert execute(["--root", str(root), "temp", "0", "50"], surfaces={"gpu": NvmlSurface()}) == 0
    return root


@pytest.mark.parametrize(("assignment", "named"), [
    ("memory.total_bytes=18446744073709551616", "18446744073709551615"),   # 2**64: past u64
    ("pci.device_id=0x1ffffffff", "4294967295"),                           # 33 bits into a u32
    ("name=" + "x" * 96, "95"),                                            # the library holds 95 bytes
    ("name=" + "\u00e9" * 60, "95"),                                       # 60 characters, 120 bytes in UTF-8
    ("mig.max_gpu_instances=4294967295", "0..8"),                          # the MIG devices a GPU holds
    ("pcie.replay_counter=4294967296", "0..4294967295"),
])
def test_ctl_set_refuses_what_the_library_rejects(root: Path, capsys, assignment: str, named: str) -> None:
    before = (root / OVERRIDE_FILE).read_bytes()
    assert execute(["--root", str(root), "set", "0", assignment], surfaces={"gpu": NvmlSurface()}) == 1
    err = capsys.readouterr().err
    assert "state file key device.0." in err and named in err, err
    assert "Traceback" not in err
    assert (root / OVERRIDE_FILE).read_bytes() == before


@pytest.mark.parametrize("field", ["  nvml_version", "name"])
def test_line_break_in_a_profile_string_is_refused(tmp_path: Path, field: str) -> None:
    evil = f'{field}: "550.1\\ndevice.0.temperature.gpu=92"'
    text = re.sub(rf"^{field}: .*$", lambda _: evil, builtin_text("t4"), count=1, flags=re.M)
    assert "\\ndevice.0" in text
    path = tmp_path / "evil.yaml"
    path.write_text(text)
    result = CliRunner().invoke(app, ["profile", "validate", str(path)])
    assert result.exit_code == 1, result.output
    assert "control character" in result.output and field.strip() in result.output


def test_profile_validate_bounds_cpu_ids(tmp_path: Path) -> None:
    """`cpu_affinity: "0-999999999"` ran `mokka run` out of memory; validate now names the key and the bound."""
    text = builtin_text("h100")
    assert "cpu_affinity:" in text
    path = tmp_path / "huge.yaml"
    path.write_text(re.sub(r'cpu_affinity: "[^"]*"', 'cpu_affinity: "0-999999999"', text, count=1))
    result = CliRunner().invoke(app, ["profile", "validate", str(path)])
    assert result.exit_code == 1 and "cpu_affinity" in result.output and "1024" in result.output, result.output
    path.write_text(re.sub(r'cpu_affinity: "[^"]*"', 'cpu_affinity: "0-2047"', text))
    result = CliRunner().invoke(app, ["profile", "validate", str(path)])
    assert result.exit_code == 1 and "cpu_affinity" in result.output and "1024" in result.output, result.output


def test_the_profile_cpu_bound_is_the_librarys() -> None:
    from mokka_core.schema.profile import MAX_CPUS
    from mokka_core.stage.nvml_keys import SIZES

    assert SIZES["device"]["cpu_affinity"] == MAX_CPUS


def test_control_characters_in_gpu_strings_are_refused(root: Path, capsys) -> None:
    before = (root / OVERRIDE_FILE).read_bytes()
    assert execute(["--root", str(root), "set", "0", "name=\"H100\\nend\""], surfaces={"gpu": NvmlSurface()}) == 1
    err = capsys.readouterr().err
    assert "name: control characters are not allowed" in err and "override unchanged" in err, err
    assert (root / OVERRIDE_FILE).read_bytes() == before


def test_control_characters_in_the_node_name_are_refused() -> None:
    node = NodeSpec(profile="t4").resolve()
    with pytest.raises(ValueError, match="node name"):
        render_nvml_state(node.replace(node_name="n1\nend"))


def test_a_120000_digit_ctl_value_is_a_message(root: Path, capsys) -> None:
    before = (root / OVERRIDE_FILE).read_bytes()
    assert execute(["--root", str(root), "set", "0", "memory.total_bytes=" + "9" * 120_000],
                   surfaces={"gpu": NvmlSurface()}) == 1
    err = capsys.readouterr().err
    assert "memory.total_bytes" in err and "digits" in err and "Traceback" not in err
    assert (root / OVERRIDE_FILE).read_bytes() == before


def test_bounds_come_from_the_key_table() -> None:
    assert value_problem("device.0.memory.total", str(2**64 - 1)) is None
    assert "u64 range" in (value_problem("device.0.memory.total", str(2**64)) or "")
    assert value_problem("device.0.lost", "-2147483648") is None
    assert value_problem("device.0.lost", "2147483648") is not None
    assert value_problem("device.0.uuid", "G" * 95) is None and value_problem("device.0.uuid", "G" * 96)
    assert value_problem("device.0.cpu_affinity", "0-1023") is None
    assert value_problem("device.0.topology.levels", ",".join(["0"] * 257))
    assert value_problem("device.0.unknown_key", "anything") is None


def test_gpu_count_is_bounded_by_the_library() -> None:
    assert MAX_GPUS == LIMITS["device"] >= 72
    result = CliRunner().invoke(app, ["show", "--profile", "t4", "--gpus", "100000"])
    assert isinstance(result.exception, MokkaError) and f"must be at most {MAX_GPUS}" in str(result.exception)


def test_hca_bus_exhaustion_is_a_message() -> None:
    """`--gpus 66` on h100 ran out of HCA bus numbers with a LookupError traceback."""
    result = CliRunner().invoke(app, ["show", "--profile", "h100", "--gpus", "66"])
    assert isinstance(result.exception, MokkaError) and "no PCI bus for HCA" in str(result.exception)


@pytest.mark.parametrize("name", ["../../../x/EVIL", "Node_1", "n1\nend", "a" * 254, "-edge", "x."])
def test_node_names_are_dns_1123_subdomains(name: str) -> None:
    with pytest.raises(MokkaError, match="DNS-1123"):
        NodeSpec(profile="t4", node_name=name).resolve()


def test_valid_node_names_resolve() -> None:
    for name in ("mokka-node", "gpu-01.rack-3.example.com", "a" * 253):
        assert NodeSpec(profile="t4", node_name=name).resolve().node_name == name


def _validate(tmp_path: Path, text: str) -> str:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    result = CliRunner().invoke(app, ["profile", "validate", str(path)])
    assert result.exit_code == 1, result.output
    return result.output


T4_ENTRY = '  - {index: 0, pci: {bus_id: "0000:00:1e.0"}}'


def test_validate_refuses_what_run_refuses(tmp_path: Path) -> None:
    """`profile validate` said ok to these, and `run` failed on them or showed a node no real one is."""
    t4 = builtin_text("t4")
    assert T4_ENTRY in t4 and "device_id: 0x1EB810DE" in t4 and "num_devices: 1" in t4
    two = t4.replace("num_devices: 1", "num_devices: 2")
    uuid = "GPU-11111111-2222-3333-4444-555555555555"
    pci33 = t4.replace("device_id: 0x1EB810DE", "device_id: 0x1EB810DE0")
    assert "device.0.pci.device_id" in _validate(tmp_path, pci33)
    assert "u64 range" in _validate(tmp_path, t4.replace("total_bytes: 16106127360", f"total_bytes: {2**64}"))
    assert "not below the GPU count 1" in _validate(
        tmp_path, t4.replace(T4_ENTRY, T4_ENTRY + '\n  - {index: 5, pci: {bus_id: "0000:00:1f.0"}}'))
    assert "UUIDs are unique" in _validate(tmp_path, two.replace(
        T4_ENTRY, f'  - {{index: 0, uuid: {uuid}, pci: {{bus_id: "0000:00:1e.0"}}}}\n  - {{index: 1, uuid: {uuid}}}'))
    assert "used twice" in _validate(tmp_path, two.replace(T4_ENTRY, T4_ENTRY + "\n" + T4_ENTRY.replace("0,", "1,")))
    assert "levels deep" in _validate(tmp_path, t4 + "extra: " + "[" * 500 + "]" * 500 + "\n")


def test_override_devices_that_do_not_exist_are_refused(tmp_path: Path) -> None:
    override = tmp_path / "overrides.yaml"
    override.write_text("version: 1\ndevices:\n  '9': {thermal: {temperature_gpu_c: 50}}\n")
    with pytest.raises(MokkaError, match="no GPU 9 on this node"):
        NodeSpec(profile="t4", override_file=override).resolve()


@pytest.mark.usefixtures("whole_node")
def test_a_string_the_library_cannot_hold_is_a_message_under_run(tmp_path: Path) -> None:
    """Found by fuzz/fuzz_documents.py: the renderer's bound was a ValueError, so `mokka run` printed a traceback."""
    path = tmp_path / "long.yaml"
    path.write_text(builtin_text("t4").replace("board_part_number: 900-2G183-A800-001",
                                               "board_part_number: 900-2G183-A800-001-" + "x" * 20))
    done = subprocess.run([sys.executable, "-m", "mokka_core", "run", "--profile-file", str(path), "--", "true"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "device.0.board_part_number: is 39 bytes long (UTF-8), more than 31" in done.stderr


def _edited_t4(case: str) -> str:
    t4 = builtin_text("t4")
    assert T4_ENTRY in t4 and "device_id: 0x1EB810DE" in t4 and "num_devices: 1" in t4 and "\n  name: " in t4
    two = t4.replace("num_devices: 1", "num_devices: 2")
    return {
        "pci-id-of-33-bits": t4.replace("device_id: 0x1EB810DE", "device_id: 0x1EB810DE0"),
        "line-break-in-the-gpu-name": re.sub(r"\n  name: .*", lambda _: '\n  name: "Tesla\\nT4"', t4, count=1),
        "bus-id-used-twice": two.replace(T4_ENTRY, T4_ENTRY + "\n" + T4_ENTRY.replace("0,", "1,")),
        "nested-500-deep": t4 + "extra: " + "[" * 500 + "]" * 500 + "\n",
        "uuid-used-twice": two.replace(T4_ENTRY, '  - {index: 0, uuid: GPU-11111111-2222-3333-4444-555555555555}\n'
                                                 '  - {index: 1, uuid: GPU-11111111-2222-3333-4444-555555555555}'),
        "memory-past-u64": t4.replace("total_bytes: 16106127360", f"total_bytes: {2**64}"),
        "index-past-the-count": t4.replace(T4_ENTRY, T4_ENTRY + '\n  - {index: 5, pci: {bus_id: "0000:00:1f.0"}}'),
    }[case]


REFUSED = [
    ("pci-id-of-33-bits", "device.0.pci.device_id: 8246070752 is outside the u32 range"),
    ("line-break-in-the-gpu-name", "device_defaults: name: control characters are not allowed"),
    ("bus-id-used-twice", "used twice"),
    ("nested-500-deep", "nested more than 32 levels deep"),
    ("memory-past-u64", "device.0.memory.total: 18446744073709551616 is outside the u64 range"),
    ("index-past-the-count", "not below the GPU count 1"),
    ("uuid-used-twice", "UUIDs are unique"),
]
RENDERED = ("pci-id-of-33-bits", "memory-past-u64")  # bounds of the state file, which show does not render
RUN, SHOW = ["run", "--profile-file", "{}", "--", "true"], ["show", "--profile-file", "{}"]


@pytest.mark.parametrize(("case", "message", "command"), [
    *[(case, message, RUN) for case, message in REFUSED],
    *[(case, message, SHOW) for case, message in REFUSED if case not in RENDERED],
])
@pytest.mark.usefixtures("whole_node")
def test_what_validate_refuses_run_and_show_refuse_with_a_message(tmp_path: Path, case: str, message: str,
                                                                   command: list[str]) -> None:
    """Issue 18 item 14: a 33-bit PCI id under `mokka run` was a ValueError traceback (the renderer's bound)."""
    path = tmp_path / f"{case}.yaml"
    path.write_text(_edited_t4(case))
    assert message in _validate(tmp_path, path.read_text())
    done = subprocess.run([sys.executable, "-m", "mokka_core", *[arg.format(path) for arg in command]],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert message in done.stderr, done.stderr


def test_more_gpus_than_the_hca_buses_hold_is_a_message_under_run() -> None:
    done = subprocess.run([sys.executable, "-m", "mokka_core", "run", "--profile", "h100", "--gpus", "66", "--",
                           "true"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "no PCI bus for HCA 65" in done.stderr, done.stderr
