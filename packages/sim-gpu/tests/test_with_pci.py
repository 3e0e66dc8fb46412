"""The gpu and pci surfaces agree (they render the same node state) and stage together cleanly."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mokka_core.stage.staging import stage_wave, teardown
from mokka_core.stage.surface import StageContext
from mokka_sim_gpu.surface import GpuSurface

pci_surface = pytest.importorskip("mokka_sim_pci.surface", reason="sim-pci is not installed in this environment")


def information(root: Path, bus_id: str) -> dict[str, str]:
    text = (root / "proc/driver/nvidia/gpus" / bus_id / "information").read_text()
    return {key.strip(): value.strip() for key, value in (line.split(":", 1) for line in text.splitlines())}


def test_both_surfaces_in_one_wave_agree_and_leave_no_residue(tmp_path: Path, make_node, native_dir: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    node = make_node("h100")
    ctx = StageContext(root=root, native_dir=native_dir)
    stage_wave({"gpu": GpuSurface().plan(node, ctx), "pci": pci_surface.PciSurface().plan(node, ctx)}, root)
    for gpu in node.gpus:
        sysfs = root / "sys/bus/pci/devices" / gpu.bus_id
        info = information(root, gpu.bus_id)
        assert info["IRQ"] == (sysfs / "irq").read_text().strip()
        assert info["DMA Size"] == f"{(sysfs / 'dma_mask_bits').read_text().strip()} bits"
        assert info["Bus Location"] == gpu.bus_id
    driver_module = root / "sys/bus/pci/drivers/nvidia/module"
    assert os.path.realpath(driver_module) == str((root / "sys/module/nvidia").resolve())
    teardown(root, "gpu")
    teardown(root, "pci")
    assert list(root.iterdir()) == []
