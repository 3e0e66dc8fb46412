"""The board table the consumer tests expect equals the real captures (``reference/captures/``)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from boards import BOARDS, CUDA_OF_BRANCH, PROFILES

CAPTURES = Path(__file__).resolve().parents[2] / "reference" / "captures"


@pytest.mark.parametrize("profile", [p for p in PROFILES if (CAPTURES / f"qx-{p}.xml").exists()])
def test_board_table_matches_the_capture(profile: str) -> None:
    capture = CAPTURES / f"qx-{profile}.xml"
    gpu = ET.parse(capture).getroot().find("gpu")
    assert gpu is not None
    board = BOARDS[profile]
    assert gpu.findtext("product_name") == board.name
    assert gpu.findtext("fb_memory_usage/total") == f"{board.fb_total_mib} MiB"
    assert (gpu.findtext("mig_mode/current_mig") != "N/A") == board.mig_capable
    assert (gpu.findtext("fabric/state") != "N/A") == board.fabric


@pytest.mark.parametrize("profile", [p for p in PROFILES if (CAPTURES / f"qx-{p}.xml").exists()])
def test_pci_identity_and_bar1_match_the_capture(profile: str) -> None:
    gpu = ET.parse(CAPTURES / f"qx-{profile}.xml").getroot().find("gpu")
    assert gpu is not None
    board = BOARDS[profile]
    assert gpu.findtext("pci/pci_device_id") == f"{board.pci_device:04X}10DE"
    assert gpu.findtext("pci/pci_sub_system_id") == f"{board.pci_subsystem:08X}"
    assert gpu.findtext("bar1_memory_usage/total") == f"{board.bar1_mib} MiB"
    assert gpu.findtext("product_brand") == board.brand.upper()
    assert gpu.findtext("product_architecture") == board.architecture_name
    assert gpu.findtext("addressing_mode") == board.addressing_mode
    fabric = gpu.findtext("fabric/clusterUuid") not in (None, "N/A", "00000000-0000-0000-0000-000000000000")
    assert fabric == board.fabric_attached


@pytest.mark.parametrize("capture", sorted(CAPTURES.glob("qx-*.xml")), ids=lambda path: path.stem)
def test_cuda_of_the_driver_branch_matches_the_capture(capture: Path) -> None:
    log = ET.parse(capture).getroot()
    branch = int((log.findtext("driver_version") or "").split(".")[0])
    assert ".".join(map(str, CUDA_OF_BRANCH[branch])) == log.findtext("cuda_version")
