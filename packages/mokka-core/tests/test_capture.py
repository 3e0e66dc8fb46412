"""Captures of real nodes (``nvidia-smi -q -x``): their facts, the comparison, the import, bad input.

The snippets are cut from the real captures in ``reference/captures`` (values verbatim).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mokka_core.model.spec import NodeSpec
from mokka_core.schema.builtin import builtin_text
from mokka_core.schema.capture.compare import compare
from mokka_core.schema.capture.facts import UNIT_OR_MOMENT, CaptureError, parse_capture, read_capture
from mokka_core.schema.capture.importer import closest_builtin, import_profile
from mokka_core.schema.loader import load_profile
from mokka_core.stage.nvml_view import render_nvml_state

CAPTURES = Path(__file__).resolve().parents[3] / "reference" / "captures"
BOARDS = ("a100", "h100", "b200", "gb200", "gb300", "l40s", "t4")


def document(gpus: str, driver: str = "580.105.08") -> str:
    return (f'<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd">\n<nvidia_smi_log>\n'
            f"<timestamp>Fri Aug 21 10:21:36 2026</timestamp><driver_version>{driver}</driver_version>"
            f"<cuda_version>13.0</cuda_version><attached_gpus>8</attached_gpus>\n{gpus}</nvidia_smi_log>\n")


H100_GPU = """<gpu id="00000000:18:00.0">
<product_name>NVIDIA H100 80GB HBM3</product_name>
<display_mode>Requested functionality has been deprecated</display_mode>
<serial>1650000000001</serial><uuid>GPU-00000000-0000-0000-0000-000000000000</uuid>
<vbios_version>96.00.99.00.01</vbios_version>
<pci><pci_bus>18</pci_bus><pci_device_id>233010DE</pci_device_id><tx_util>350 KB/s</tx_util></pci>
<fb_memory_usage><total>81559 MiB</total><reserved>480 MiB</reserved><used>0 MiB</used><free>81080 MiB</free>
</fb_memory_usage>
<temperature><gpu_temp>30 C</gpu_temp><gpu_temp_max_tlimit_threshold>-8 C</gpu_temp_max_tlimit_threshold>
</temperature>
<supported_clocks><supported_mem_clock><value>2619 MHz</value>
<supported_graphics_clock>1980 MHz</supported_graphics_clock>
<supported_graphics_clock>1965 MHz</supported_graphics_clock>
</supported_mem_clock></supported_clocks>
</gpu>
"""


def test_model_facts_leave_out_the_unit_and_the_moment() -> None:
    capture = parse_capture(document(H100_GPU), "h100.xml")
    assert capture.node_facts() == {"driver_version": "580.105.08", "cuda_version": "13.0", "attached_gpus": "1"}
    assert capture.gpu_facts(0) == {
        "product_name": "NVIDIA H100 80GB HBM3",
        "vbios_version": "96.00.99.00.01",
        "pci/pci_device_id": "233010DE",
        "fb_memory_usage/total": "81559 MiB",
        "fb_memory_usage/reserved": "480 MiB",
        "temperature/gpu_temp_max_tlimit_threshold": "-8 C",
        "supported_clocks/supported_mem_clock/value": "2619 MHz",
        "supported_clocks/supported_mem_clock/supported_graphics_clock": "1980 MHz, 1965 MHz",
    }
    # the moment and the unit are read (the import uses some), not facts
    assert capture.gpus[0]["serial"] == "1650000000001" and capture.gpus[0]["temperature/gpu_temp"] == "30 C"


def test_older_drivers_element_names_compare_with_the_newest() -> None:
    old = document("""<gpu id="00000000:07:00.0"><gpu_module_id>1</gpu_module_id>
<clocks_throttle_reasons><clocks_throttle_reason_gpu_idle>Active</clocks_throttle_reason_gpu_idle>
</clocks_throttle_reasons>
<power_readings><power_draw>54.00 W</power_draw><default_power_limit>400.00 W</default_power_limit></power_readings>
</gpu>""", driver="525.147.05")
    new = document("""<gpu id="00000000:06:00.0"><platformInfo><module_id>7</module_id></platformInfo>
<clocks_event_reasons><clocks_event_reason_gpu_idle>Active</clocks_event_reason_gpu_idle></clocks_event_reasons>
<gpu_power_readings><instant_power_draw>49.68 W</instant_power_draw>
<default_power_limit>400.00 W</default_power_limit></gpu_power_readings>
</gpu>""", driver="570.148.08")
    old_gpu, new_gpu = parse_capture(old, "old.xml").gpus[0], parse_capture(new, "new.xml").gpus[0]
    assert set(old_gpu) == set(new_gpu) == {
        "platformInfo/module_id", "clocks_event_reasons/clocks_event_reason_gpu_idle",
        "gpu_power_readings/instant_power_draw", "gpu_power_readings/default_power_limit"}
    result = compare(parse_capture(old, "old.xml"), parse_capture(new, "new.xml"))
    assert (result.matched, result.not_comparable) == (3, 0)  # attached_gpus, cuda_version, the power limit
    assert [(d.path, d.captured, d.simulated) for d in result.differences] == [
        ("driver_version", "525.147.05", "570.148.08")]


def test_repeated_parents_are_numbered() -> None:
    two_clocks = document("""<gpu id="00000000:3B:00.0"><supported_clocks>
<supported_mem_clock><value>5001 MHz</value><supported_graphics_clock>1590 MHz</supported_graphics_clock>
</supported_mem_clock>
<supported_mem_clock><value>405 MHz</value><supported_graphics_clock>405 MHz</supported_graphics_clock>
</supported_mem_clock>
</supported_clocks></gpu>""")
    facts = parse_capture(two_clocks, "t4.xml").gpu_facts(0)
    assert facts["supported_clocks/supported_mem_clock[0]/value"] == "5001 MHz"
    assert facts["supported_clocks/supported_mem_clock[1]/supported_graphics_clock"] == "405 MHz"


def test_compare_counts_matches_differences_and_what_only_one_side_has() -> None:
    real = parse_capture(document(H100_GPU * 2), "real.xml")
    ours = parse_capture(document(H100_GPU.replace("96.00.99.00.01", "96.00.30.00.01").replace(
        "<gpu_temp_max_tlimit_threshold>-8 C</gpu_temp_max_tlimit_threshold>",
        "<gpu_temp_max_threshold>92 C</gpu_temp_max_threshold>")), "ours.xml")
    result = compare(real, ours)
    assert result.gpus_compared == 1
    assert [(d.where, d.captured, d.simulated) for d in result.differences] == [
        ("attached_gpus", "2", "1"), ("gpu[0]/vbios_version", "96.00.99.00.01", "96.00.30.00.01")]
    assert result.not_comparable == 2  # the T.Limit threshold only in one, the absolute one only in the other
    assert result.matched == 2 + 6
    assert result.score_line() == "fidelity 8/10 (80.0%)"


def test_every_excluded_element_is_in_a_real_capture_or_an_older_driver() -> None:
    seen = {path for board in BOARDS for gpu in read_capture(CAPTURES / f"qx-{board}.xml").gpus for path in gpu}
    seen |= {"timestamp", "processes", "mig_devices", "accounted_processes"}  # node-level, or empty in the captures
    for excluded in UNIT_OR_MOMENT:
        assert any(path == excluded or path.startswith(excluded + "/") for path in seen), excluded


@pytest.mark.parametrize(("content", "reason"), [
    ("driver_version: 550.163.01\n", "not well-formed XML"),
    ('<?xml version="1.0" ?>\n<svg><g/></svg>\n', "the root element is <svg>, not <nvidia_smi_log>"),
    ("<nvidia_smi_log><timestamp>x</timestamp></nvidia_smi_log>", "no <driver_version>"),
    (document(H100_GPU)[:900], "not well-formed XML (truncated?)"),
    (document(""), "no <gpu> element"),
])
def test_a_bad_capture_is_refused_naming_the_file(tmp_path: Path, content: str, reason: str) -> None:
    path = tmp_path / "capture.xml"
    path.write_text(content)
    with pytest.raises(CaptureError) as refused:
        read_capture(path)
    assert str(refused.value).startswith(f"{path}: ") and reason in str(refused.value)


@pytest.mark.parametrize("verb", [["import"], ["diff", "--profile", "h100"]])
def test_the_commands_exit_1_on_a_bad_capture(tmp_path: Path, verb: list[str]) -> None:
    path = tmp_path / "truncated.xml"
    path.write_text((CAPTURES / "qx-t4.xml").read_text()[:5000])
    done = subprocess.run([sys.executable, "-m", "mokka_core", "profile", verb[0], str(path), *verb[1:]],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{path}: not well-formed XML (truncated?)" in done.stderr


@pytest.mark.parametrize("board", BOARDS)
def test_each_capture_imports_into_a_valid_profile_of_its_board(tmp_path: Path, board: str) -> None:
    capture = read_capture(CAPTURES / f"qx-{board}.xml")
    assert closest_builtin(capture) == board
    path = tmp_path / "twin.yaml"
    path.write_text(import_profile(capture).yaml())
    load_profile(path)
    node = NodeSpec(profile_file=path).resolve()
    render_nvml_state(node)  # what `mokka profile validate` checks too
    assert len(node.gpus) == capture.gpu_count
    first = capture.gpus[0]
    assert node.system.driver_version == capture.node["driver_version"]
    assert node.gpus[0].config.name == first["product_name"]
    assert node.gpus[0].config.vbios_version == first["vbios_version"]
    assert f"{node.gpus[0].config.memory.total_bytes >> 20} MiB" == first["fb_memory_usage/total"]


def test_the_header_names_what_comes_from_the_board() -> None:
    text = import_profile(read_capture(CAPTURES / "qx-gb200.xml")).yaml()
    header = [line for line in text.splitlines() if line.startswith("#")]
    assert "# Starts from the built-in profile gb200; the capture cannot say these, so they are gb200's:" in header
    assert "#   nvlink: NVLink links, switches and peers" in header
    assert "#   the GPUs' bus ids: the capture's are outside gb200's root complexes" in header
    assert "#   gpu_part_number" in header  # a fact the profile format has no key for yet


def test_a_gpu_that_differs_gets_its_own_entry_and_processes_are_imported() -> None:
    capture = read_capture(CAPTURES / "qx-h100.xml")
    profile = import_profile(capture).profile
    parts = {gpu["board_part_number"] for gpu in capture.gpus}
    assert len(parts) == 2  # the real node has one board of another part number
    assert [d.get("board_part_number") for d in profile["devices"] if "board_part_number" in d] == \
        [gpu["board_part_number"] for gpu in capture.gpus
         if gpu["board_part_number"] != capture.gpus[0]["board_part_number"]]
    with_processes = document(H100_GPU.replace("</gpu>", """<processes><process_info>
<gpu_instance_id>N/A</gpu_instance_id><compute_instance_id>N/A</compute_instance_id><pid>4242</pid><type>C</type>
<process_name>python3</process_name><used_memory>1024 MiB</used_memory></process_info><process_info>
<pid>4243</pid><type>C+G</type><process_name>Xorg</process_name><used_memory>N/A</used_memory></process_info>
</processes></gpu>"""))
    profile = import_profile(parse_capture(with_processes, "busy.xml")).profile
    assert profile["devices"][0]["processes"] == [
        {"pid": 4242, "type": "C", "name": "python3", "used_memory_mib": 1024},
        {"pid": 4243, "type": "C+G", "name": "Xorg"}]


def test_import_writes_a_file_validate_accepts(tmp_path: Path) -> None:
    out = tmp_path / "t4-twin.yaml"
    done = subprocess.run([sys.executable, "-m", "mokka_core", "profile", "import", str(CAPTURES / "qx-t4.xml"),
                           "-o", str(out), "--name", "t4-lab"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "1 x Tesla T4, driver 595.91.07, from the built-in t4" in done.stderr
    assert yaml.safe_load(out.read_text())["name"] == "t4-lab"
    done = subprocess.run([sys.executable, "-m", "mokka_core", "profile", "validate", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_the_pcie_generations_a_capture_states_reach_the_state_file(tmp_path: Path) -> None:
    # GB200 in a VM: link max 5, the GPU's own max 6, the host's unknown (N/A)
    capture = read_capture(CAPTURES / "qx-gb200.xml")
    gen = {key: capture.gpus[0][f"pci/pci_gpu_link_info/pcie_gen/{key}"]
           for key in ("max_link_gen", "max_device_link_gen", "max_host_link_gen")}
    assert gen == {"max_link_gen": "5", "max_device_link_gen": "6", "max_host_link_gen": "N/A"}
    path = tmp_path / "twin.yaml"
    path.write_text(import_profile(capture).yaml())
    lines = set(render_nvml_state(NodeSpec(profile_file=path).resolve()).splitlines())
    assert {"device.0.pcie.max_gen=5", "device.0.pcie.gpu_max_gen=6", "device.0.pcie.host_max_gen=0"} <= lines
    # a board that states only its maximum keeps it for all three
    only_max = tmp_path / "only-max.yaml"
    only_max.write_text(builtin_text("t4").replace(", max_host_link_gen: N/A", ""))
    lines = set(render_nvml_state(NodeSpec(profile_file=only_max).resolve()).splitlines())
    assert {"device.0.pcie.max_gen=3", "device.0.pcie.gpu_max_gen=3", "device.0.pcie.host_max_gen=3"} <= lines


def test_an_element_older_nvidia_smi_cannot_fill_is_not_comparable() -> None:
    real = parse_capture(document('<gpu id="00000000:06:00.0"><addressing_mode>HMM</addressing_mode>'
                                  "<persistence_mode>Enabled</persistence_mode></gpu>"), "real.xml")
    ours = parse_capture(document('<gpu id="00000000:06:00.0"><addressing_mode>N/A</addressing_mode>'
                                  "<persistence_mode>N/A</persistence_mode></gpu>"), "ours.xml")
    result = compare(real, ours)
    assert result.not_comparable == 1  # addressing_mode: nvidia-smi 535-555 never asks
    assert [d.path for d in result.differences] == ["persistence_mode"]  # N/A elsewhere is a difference


def test_a_value_the_format_has_no_word_for_keeps_the_boards_and_says_so() -> None:
    newer = document(H100_GPU.replace("</gpu>", "<product_architecture>Rubin</product_architecture>"
                                                "<compute_mode>Default</compute_mode></gpu>"))
    imported = import_profile(parse_capture(newer, "rubin.xml"))
    assert imported.board == "h100" and imported.profile["device_defaults"]["architecture"] == "hopper"
    assert imported.profile["device_defaults"]["compute_mode"] == "default"
    assert imported.header[-2:] == ["The profile format has no word for these values: h100's stay:",
                           "  product_architecture: Rubin"]


def test_mig_partitions_in_a_capture_are_named_in_the_header() -> None:
    partitioned = document(H100_GPU.replace("</gpu>", """<mig_mode><current_mig>Enabled</current_mig>
<pending_mig>Enabled</pending_mig></mig_mode><mig_devices><mig_device><index>0</index>
<gpu_instance_id>1</gpu_instance_id><compute_instance_id>0</compute_instance_id></mig_device></mig_devices></gpu>"""))
    capture = parse_capture(partitioned, "mig.xml")
    assert "mig_devices/mig_device/index" not in capture.gpu_facts(0)  # node state, not the model
    imported = import_profile(capture)
    assert imported.profile["device_defaults"]["mig"]["mode_current"] == "enabled"
    assert any(line.startswith("  the capture's MIG partitions (mig_devices)") for line in imported.header)
