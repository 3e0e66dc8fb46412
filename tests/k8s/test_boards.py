"""The board table the consumer tests expect equals the real captures (``reference/captures/``)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from boards import BOARDS, PROFILES

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
