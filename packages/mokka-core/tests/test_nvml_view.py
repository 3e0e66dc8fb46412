"""The NVML state file renderer: golden files, and the real nvidia-smi reading what it renders."""

from __future__ import annotations

import os
import stat
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from mokka_core.builtin import BUILTIN_PROFILES
from mokka_core.native import native_dir
from mokka_core.nvml_view import HEADER, nvml_bus_id, render_nvml_state, write_nvml_state
from mokka_core.spec import NodeSpec
from mokka_core.testing import consumers

GOLDEN = Path(__file__).parent / "golden"
GOLDEN_CASES = {"h100": {}, "t4": {}, "gb200": {"gpus": 4}}


@pytest.mark.parametrize("profile", list(GOLDEN_CASES))
def test_golden(profile: str) -> None:
    text = render_nvml_state(NodeSpec(profile=profile, node_name="golden-node", **GOLDEN_CASES[profile]).resolve())
    path = GOLDEN / f"{profile}.state"
    if os.environ.get("MOKKA_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"{path} differs; MOKKA_UPDATE_GOLDEN=1 regenerates it"


@pytest.mark.parametrize("profile", BUILTIN_PROFILES)
def test_framing_and_keys(profile: str) -> None:
    node = NodeSpec(profile=profile).resolve()
    lines = render_nvml_state(node).splitlines()
    assert lines[0] == HEADER and lines[-1] == "end"
    kv = dict(line.split("=", 1) for line in lines[1:-1] if not line.startswith("#"))
    assert kv["system.device_count"] == str(len(node.gpus))
    for gpu in node.gpus:
        assert kv[f"device.{gpu.index}.uuid"] == gpu.uuid
        assert kv[f"device.{gpu.index}.pci.bus_id"] == nvml_bus_id(gpu.bus_id)
        assert len(kv[f"device.{gpu.index}.topology.levels"].split(",")) == len(node.gpus)


def test_render_is_pure_and_deterministic() -> None:
    a = render_nvml_state(NodeSpec(profile="a100", node_name="n1").resolve())
    assert a == render_nvml_state(NodeSpec(profile="a100", node_name="n1").resolve())
    assert a != render_nvml_state(NodeSpec(profile="a100", node_name="n2").resolve())


def test_failed_gpu_surface_and_lost_gpu(tmp_path: Path) -> None:
    failed = render_nvml_state(NodeSpec(profile="h100", surfaces={"gpu": {"state": "failed"}}).resolve())
    assert "system.init_error=9\n" in failed
    override = tmp_path / "override.yaml"
    override.write_text("version: 1\ndevices:\n  '3':\n    failure: {mode: fallen_off_bus}\n"
                        "    xid_events: [{code: 79, seq: 7}]\n")
    text = render_nvml_state(NodeSpec(profile="h100", override_file=override).resolve())
    assert "device.3.lost=1\n" in text and "device.2.lost=0\n" in text
    assert "event.0.seq=7\nevent.0.device=3\nevent.0.type=8\nevent.0.data=79\n" in text


def test_dynamic_metrics_rendered(tmp_path: Path) -> None:
    override = tmp_path / "override.yaml"
    override.write_text("version: 1\nall:\n  dynamic_metrics:\n    seed: 7\n"
                        "    utilization: {pattern: burst, gpu_min: 10, gpu_max: 45}\n"
                        "    power: {base_mw: 300000, variance_mw: 20000}\n")
    text = render_nvml_state(NodeSpec(profile="a100", override_file=override).resolve())
    for key in ("seed=7", "utilization=1", "utilization.pattern=3", "utilization.gpu_max=45", "power.base_mw=300000"):
        assert f"device.0.dynamic.{key}\n" in text
    assert "device.0.dynamic.temperature=" not in text


def test_write_is_atomic_and_world_readable(tmp_path: Path) -> None:
    path = tmp_path / "mokka-nvml.state"
    node = NodeSpec(profile="t4").resolve()
    write_nvml_state(node, path)
    write_nvml_state(node, path)
    assert path.read_text() == render_nvml_state(node)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["mokka-nvml.state"]


# ---- end to end: real nvidia-smi through the mock library ------------------------------------------

def _library_dir() -> Path:
    directory = native_dir()
    if directory is None or not (directory / "libnvidia-ml.so.1").exists():
        consumers.missing("mock libnvidia-ml not built (make -C native install)")
    return directory


@pytest.fixture(scope="module", params=["535", "550"])
def smi(request: pytest.FixtureRequest) -> Path:
    return consumers.require("nvidia-smi", version=request.param)


def _run(smi: Path, state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOKKA_NVML")}
    env.update(LD_LIBRARY_PATH=str(_library_dir()), MOKKA_NVML_STATE=str(state))
    return subprocess.run([str(smi), *args], env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("profile", BUILTIN_PROFILES)
def test_nvidia_smi_shows_profile_values(smi: Path, tmp_path: Path, profile: str) -> None:
    node = NodeSpec(profile=profile).resolve()
    state = write_nvml_state(node, tmp_path / "mokka-nvml.state")
    p = _run(smi, state, "-q", "-x")
    assert p.returncode == 0, p.stdout + p.stderr
    root = ET.fromstring(p.stdout)
    assert root.findtext("driver_version") == node.system.driver_version
    gpus = root.findall("gpu")
    assert len(gpus) == len(node.gpus)
    for g, gpu in zip(gpus, node.gpus, strict=True):
        c = gpu.config
        assert g.findtext("product_name") == c.name
        assert g.findtext("uuid") == gpu.uuid
        assert g.findtext("serial") == gpu.serial
        assert g.findtext("pci/pci_bus_id") == nvml_bus_id(gpu.bus_id)
        assert c.pci is not None and c.memory is not None and c.power is not None and c.clocks is not None
        assert int(g.findtext("pci/pci_device_id") or "0", 16) == c.pci.device_id
        assert g.findtext("vbios_version") == c.vbios_version
        mib = {c.memory.total_bytes >> 20, -(-c.memory.total_bytes >> 20)}  # 535 truncates, 550 rounds up
        assert g.findtext("fb_memory_usage/total") in {f"{m} MiB" for m in mib}
        readings = g.find("gpu_power_readings")
        if readings is None:
            readings = g.find("power_readings")
        assert readings is not None
        assert readings.findtext("default_power_limit") == f"{c.power.default_limit_mw / 1000:.2f} W"
        assert g.findtext("max_clocks/graphics_clock") == f"{c.clocks.graphics_max} MHz"
    for args in ([], ["-L"], ["-q"], ["topo", "-m"], ["nvlink", "-s"]):
        p = _run(smi, state, *args)
        out = p.stdout + p.stderr
        assert p.returncode == 0, out
        assert "Function Not Found" not in out and "Unknown Error" not in out and "mokka-nvml:" not in out


def test_nvidia_smi_failure_states(smi: Path, tmp_path: Path) -> None:
    state = tmp_path / "mokka-nvml.state"
    write_nvml_state(NodeSpec(profile="h100", surfaces={"gpu": {"state": "failed"}}).resolve(), state)
    p = _run(smi, state)
    assert p.returncode == 9 and "couldn't communicate with the NVIDIA driver" in p.stdout + p.stderr
    override = tmp_path / "override.yaml"
    override.write_text("version: 1\ndevices:\n  '5':\n    failure: {mode: lost}\n")
    write_nvml_state(NodeSpec(profile="h100", override_file=override).resolve(), state)
    p = _run(smi, state, "-L")
    assert "GPU is lost" in p.stdout + p.stderr and p.stdout.count("GPU-") == 7
