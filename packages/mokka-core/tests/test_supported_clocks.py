"""Supported graphics clocks as ladders (schema/clocks.py): every capture's list is one, a ragged list is refused."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from mokka_core.errors import ConfigError
from mokka_core.schema.clocks import ladder
from mokka_core.schema.loader import load_profile

CAPTURES = Path(__file__).resolve().parents[3] / "reference" / "captures"


def _lists(capture: Path) -> list[tuple[int, ...]]:
    gpu = ET.parse(capture).getroot().find("gpu")
    assert gpu is not None
    return [tuple(int((g.text or "").split()[0]) for g in m.findall("supported_graphics_clock"))
            for m in gpu.findall("supported_clocks/supported_mem_clock")]


@pytest.mark.parametrize("capture", sorted(CAPTURES.glob("qx-*.xml")), ids=lambda p: p.stem)
def test_every_captured_list_is_a_ladder_that_lists_itself_again(capture: Path) -> None:
    lists = _lists(capture)
    assert lists
    for clocks in lists:
        found = ladder(clocks)
        assert found is not None and tuple(found.clocks()) == clocks


def test_blackwell_steps_are_fractional() -> None:
    found = ladder(_lists(CAPTURES / "qx-gb300.xml")[0])
    assert found is not None and found.step_khz == 7500 and found.clocks()[:3] == [2070, 2062, 2055]


def test_a_ragged_list_is_refused_naming_the_key(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text('version: "1"\nsystem: {driver_version: "550.163.01"}\n'
                    "device_defaults: {supported_clocks: {memory_clocks: [{freq_mhz: 2619, "
                    "graphics_clocks: [1980, 1965, 1900]}]}}\n")
    with pytest.raises(ConfigError, match=r"supported_clocks\.memory_clocks\[0\]\.graphics_clocks"):
        load_profile(path)
