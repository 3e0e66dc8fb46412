"""Each built-in profile shows real nvidia-smi (550) its board's values from the real capture.

The expected values are read from ``reference/captures/qx-<board>.xml`` itself: every element of
``BOARD_FACTS`` that both the capture and nvidia-smi 550 print is compared, except where the capture's
newer driver deprecated it (the profile follows its own driver: mokka-core README, Profiles).
"""

from __future__ import annotations

import os
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from mokka_core.model.spec import NodeSpec
from mokka_core.stage.native import native_dir
from mokka_core.stage.nvml_view import write_nvml_state
from mokka_core.testing import consumers

pytestmark = pytest.mark.consumer

CAPTURES = Path(__file__).resolve().parents[3] / "reference" / "captures"
BOARDS = ("a100", "h100", "b200", "gb200", "gb300", "l40s", "t4")
DEPRECATED = "Requested functionality has been deprecated"
LINK = "pci/pci_gpu_link_info/"

#: the board and driver elements the profiles were corrected to (issue 17)
BOARD_FACTS = (
    "product_name", "vbios_version", "board_part_number", "gpu_part_number", "persistence_mode", "addressing_mode",
    "display_mode", "c2c_mode", "sparse_operation_mode",
    "inforom_version/img_version", "inforom_version/oem_object", "inforom_version/ecc_object",
    "pci/pci_device_id", "pci/pci_sub_system_id", "pci/atomic_caps_outbound", "pci/atomic_caps_inbound",
    LINK + "pcie_gen/max_link_gen", LINK + "pcie_gen/current_link_gen", LINK + "pcie_gen/device_current_link_gen",
    LINK + "pcie_gen/max_device_link_gen", LINK + "pcie_gen/max_host_link_gen",
    LINK + "link_widths/max_link_width", LINK + "link_widths/current_link_width",
    "fb_memory_usage/total", "fb_memory_usage/reserved", "bar1_memory_usage/total",
    "remapped_rows/row_remapper_histogram/row_remapper_histogram_max",
    "temperature/gpu_temp_max_threshold", "temperature/gpu_temp_slow_threshold",
    "temperature/gpu_temp_max_gpu_threshold", "temperature/gpu_temp_max_mem_threshold",
    "temperature/gpu_temp_max_tlimit_threshold", "temperature/gpu_temp_slow_tlimit_threshold",
    "temperature/gpu_temp_max_gpu_tlimit_threshold", "temperature/gpu_temp_max_mem_tlimit_threshold",
    "gpu_power_readings/default_power_limit", "gpu_power_readings/min_power_limit",
    "gpu_power_readings/max_power_limit",
    "module_power_readings/default_power_limit", "module_power_readings/current_power_limit",
    "module_power_readings/min_power_limit", "module_power_readings/max_power_limit",
    "applications_clocks/graphics_clock", "default_applications_clocks/graphics_clock",
    "default_applications_clocks/mem_clock", "max_clocks/graphics_clock", "max_clocks/sm_clock",
    "max_clocks/mem_clock", "max_clocks/video_clock", "max_customer_boost_clocks/graphics_clock",
)
#: nvidia-smi 535-555 read at most this many supported graphics clocks (a longer list prints "Unknown Error")
SUPPORTED_GRAPHICS_READ = 256


@pytest.fixture(scope="module")
def smi() -> Path:
    return consumers.require("nvidia-smi", version="550")


def _first_gpu(document: str | Path) -> tuple[ET.Element, str]:
    root = ET.parse(document).getroot() if isinstance(document, Path) else ET.fromstring(document)
    gpu = root.find("gpu")
    assert gpu is not None
    return gpu, root.findtext("driver_version") or ""


def _simulated(smi: Path, profile: str, tmp_path: Path) -> tuple[ET.Element, str]:
    directory = native_dir()
    if directory is None:
        consumers.missing("mock libnvidia-ml not built (make -C native install)")
    state = write_nvml_state(NodeSpec(profile=profile).resolve(), tmp_path / "mokka-nvml.state")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOKKA_NVML")}
    env.update(LD_LIBRARY_PATH=str(directory), MOKKA_NVML_STATE=str(state))
    done = subprocess.run([str(smi), "-q", "-x", "-i", "0"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return _first_gpu(done.stdout)


def _supported_clocks(gpu: ET.Element) -> list[tuple[str, list[str]]]:
    return [(m.findtext("value") or "", [g.text or "" for g in m.findall("supported_graphics_clock")])
            for m in gpu.findall("supported_clocks/supported_mem_clock")]


@pytest.mark.parametrize("board", BOARDS)
def test_nvidia_smi_shows_the_captured_board(smi: Path, tmp_path: Path, board: str) -> None:
    real, real_driver = _first_gpu(CAPTURES / f"qx-{board}.xml")
    sim, sim_driver = _simulated(smi, board, tmp_path)
    expected, shown = {}, {}
    for path in BOARD_FACTS:
        want, got = real.findtext(path), sim.findtext(path)
        if want is None or got is None or want == DEPRECATED:
            continue  # an element only one of the two drivers prints
        expected[path], shown[path] = want.strip(), got.strip()
    assert len(expected) >= 35, sorted(expected)
    assert shown == expected
    # the GSP firmware is in use, so it reports its driver's version
    gsp = real.findtext("gsp_firmware_version") == real_driver
    assert gsp and sim.findtext("gsp_firmware_version") == sim_driver
    clocks = [(memory, graphics[:SUPPORTED_GRAPHICS_READ]) for memory, graphics in _supported_clocks(real)]
    assert _supported_clocks(sim) == clocks
