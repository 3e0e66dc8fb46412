"""Staging is all-or-nothing and teardown leaves the root exactly as it was."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mokka_core.errors import MokkaError
from mokka_core.stage.staging import stage_wave, teardown
from mokka_core.stage.surface import StageContext
from mokka_core.testing.tree import tree_snapshot as snapshot
from mokka_sim_pci.surface import PciSurface


def test_stage_then_teardown_restores_the_root(tmp_path: Path, make_node) -> None:
    root = tmp_path / "root"
    (root / "sys/devices/pci0000:00/0000:00:00.0").mkdir(parents=True)  # a host device beside ours
    (root / "sys/bus/pci/devices").mkdir(parents=True)
    os.symlink("../../../devices/pci0000:00/0000:00:00.0", root / "sys/bus/pci/devices/0000:00:00.0")
    before = snapshot(root)
    stage_wave({"pci": PciSurface().plan(make_node("h100"), StageContext(root=root))}, root)
    assert len(snapshot(root)) > len(before) + 500
    assert (root / "sys/class/dmi/id/product_name").is_file()  # the platform files are part of the wave
    assert (root / "sys/devices/system/node/node1/cpulist").is_file()
    teardown(root, "pci")
    assert snapshot(root) == before


def test_a_conflict_stages_nothing(tmp_path: Path, make_node) -> None:
    root = tmp_path / "root"
    clash = root / "sys/devices/pci0000:dc/0000:df:00.0/vendor"  # the last GPU's file, not Mokka's
    clash.parent.mkdir(parents=True)
    clash.write_text("0x8086\n")
    before = snapshot(root)
    with pytest.raises(MokkaError):
        stage_wave({"pci": PciSurface().plan(make_node("h100"), StageContext(root=root))}, root)
    assert snapshot(root) == before


@pytest.mark.parametrize("clash", ["sys/devices/system/node/node1/cpulist", "sys/devices/virtual/dmi/id/sys_vendor"])
def test_a_platform_file_conflict_stages_nothing(tmp_path: Path, make_node, clash: str) -> None:
    root = tmp_path / "root"
    (root / clash).parent.mkdir(parents=True)
    (root / clash).write_text("not Mokka's\n")
    before = snapshot(root)
    with pytest.raises(MokkaError):
        stage_wave({"pci": PciSurface().plan(make_node("h100"), StageContext(root=root))}, root)
    assert snapshot(root) == before
