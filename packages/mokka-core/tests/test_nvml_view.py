"""The NVML state file renderer: golden files, and the real nvidia-smi reading what it renders."""

from __future__ import annotations

import copy
import os
import random
import re
import stat
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from mokka_core.model.apply import apply
from mokka_core.model.spec import NodeSpec
from mokka_core.schema.builtin import BUILTIN_PROFILES
from mokka_core.stage import nvml_view
from mokka_core.stage.native import native_dir
from mokka_core.stage.nvml_view import HEADER, nvml_bus_id, render_nvml_state, write_nvml_state
from mokka_core.stage.surface import NvmlKeys
from mokka_core.testing import consumers

GOLDEN = Path(__file__).parent / "golden"
#: on a host with each board's own CPUs (so the golden files hold the boards' real CPU affinities)
GOLDEN_CASES = {"h100": {"host_cpus": "0-223"}, "t4": {"host_cpus": "0-3"}, "gb200": {"gpus": 4, "host_cpus": "0-143"}}


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


@pytest.fixture(scope="module", params=["535", "550", "555"])
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


# ---- node-wide PCI functions, GPU NUMA ids, fabric coupling, NVLink error clocks --------------------

def _kv(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines()[1:-1] if not line.startswith("#"))


def test_non_gpu_pci_functions_and_root_complexes_rendered() -> None:
    node = NodeSpec(profile="h100").resolve()
    kv = _kv(render_nvml_state(node))
    roots = [rc.id for rc in node.root_complexes]
    for n, hca in enumerate(node.hcas):
        assert kv[f"pcifn.{n}.bus_id"] == nvml_bus_id(hca.bus_id)
        assert kv[f"pcifn.{n}.root_complex"] == str(roots.index(hca.root_complex))
        assert kv[f"pcifn.{n}.numa_node"] == str(hca.numa_node)
        assert kv[f"pcifn.{n}.pcie_switch"] == str(hca.gpu_index)  # beside its GPU
    visible = [s for s in node.switches if s.pci_visible]
    assert visible and kv[f"pcifn.{len(node.hcas)}.bus_id"] == nvml_bus_id(visible[0].bus_id)
    for gpu in node.gpus:
        assert kv[f"device.{gpu.index}.root_complex"] == str(roots.index(gpu.root_complex))
    no_ib = _kv(render_nvml_state(NodeSpec(profile="h100", surfaces={"ib": {"enabled": False}}).resolve()))
    assert not any(key.startswith("pcifn.") and key.endswith("bus_id") and no_ib[key] == kv["pcifn.0.bus_id"]
                   for key in no_ib)


@pytest.mark.parametrize(("profile", "expected"), [("h100", None), ("a100", None), ("b200", None), ("l40s", None),
                                                   ("t4", None), ("gb200", [2, 10, 18, 26]),
                                                   ("gb300", [2, 10, 18, 26])])
def test_gpu_numa_node_only_on_coherent_grace(profile: str, expected: list[int] | None) -> None:
    node = NodeSpec(profile=profile, gpus=4).resolve()
    kv = _kv(render_nvml_state(node))
    got = [kv.get(f"device.{i}.gpu_numa_node") for i in range(4)]
    assert got == ([str(n) for n in expected] if expected else [None] * 4)


IS_ROOT = os.geteuid() == 0


def _mokka_run(smi: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``mokka run ARGS`` with the consumer nvidia-smi and this interpreter's scripts first on PATH."""
    if not IS_ROOT and not consumers.required():
        pytest.skip("mount namespaces need root (CI runs as root)")
    from mokka_core.stage.surface import discover

    wanted = {"gpu", "pci", "ib", "fabricmanager"}
    if not wanted <= set(discover()):
        reason = f"surfaces {sorted(wanted - set(discover()))} are not installed in this environment"
        if os.environ.get("MOKKA_E2E") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    _library_dir()
    path = os.pathsep.join([str(smi.parent), str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return subprocess.run([sys.executable, "-m", "mokka_core", "run", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PATH": path})


def _topo(out: str) -> dict[str, dict[str, str]]:
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in out.splitlines()]
    header = [h.strip() for h in lines[0].split("\t")[1:] if h.strip()]
    rows = {}
    for line in lines[1:]:
        if not line.strip():
            break
        name, *cells = line.split("\t")
        rows[name.strip()] = dict(zip(header, (c.strip() for c in cells if c.strip()), strict=False))
    return rows


@pytest.mark.consumer
def test_mokka_run_topo_matrix_with_nics(smi: Path) -> None:
    done = _mokka_run(smi, "--profile", "h100", "--", "nvidia-smi", "topo", "-m")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Failed to run topology matrix" not in done.stdout
    rows = _topo(done.stdout)
    node = NodeSpec(profile="h100").resolve()
    for gpu in node.gpus:
        row = rows[f"GPU{gpu.index}"]
        assert all(row[f"GPU{peer.index}"] == ("X" if peer.index == gpu.index else "NV18") for peer in node.gpus)
        own = [hca.index for hca in node.hcas if hca.gpu_index == gpu.index]
        assert own and all(row[f"NIC{n}"] in ("PIX", "PXB") for n in own)
        assert {row[f"NIC{hca.index}"] for hca in node.hcas if hca.numa_node != gpu.numa_node} == {"SYS"}
        assert row["GPU NUMA ID"] == "N/A"
    assert rows["NIC0"]["GPU0"] == rows["GPU0"]["NIC0"] and rows["NIC0"]["NIC0"] == "X"
    legend = re.findall(r"^\s+NIC(\d+): (\S+)$", done.stdout, re.M)
    assert legend == [(str(h.index), h.name) for h in node.hcas]  # mlx5_N, read from sysfs


@pytest.mark.consumer
def test_mokka_run_lost_gpu_named_by_bus_id(smi: Path) -> None:
    script = ("nvml-mock-ctl fail 3 lost >/dev/null && nvidia-smi; echo rc=$?; nvidia-smi -q | grep -c 'Product Name';"
              " nvidia-smi -L | grep -c UUID")
    done = _mokka_run(smi, "--profile", "h100", "--", "sh", "-c", script)
    bus = nvml_bus_id(NodeSpec(profile="h100").resolve().gpus[3].bus_id)[4:]  # legacy 4-digit domain
    assert f"Unable to determine the device handle for GPU{bus}: GPU is lost." in done.stdout, done.stdout
    assert "rc=15" in done.stdout
    counts = [line for line in done.stdout.splitlines() if line.isdigit()]
    assert counts == ["0", "7"]  # the default view and -q stop at the lost GPU; -L lists the others


FABRIC_WATCH = (
    "import ctypes, sys, time, pynvml as N\n"
    "class I(ctypes.Structure):\n"
    "    _fields_ = [('u', ctypes.c_char * 16), ('status', ctypes.c_uint), ('clique', ctypes.c_uint),"
    " ('state', ctypes.c_ubyte)]\n"
    "N.nvmlInit(); get = N._nvmlGetFunctionPointer('nvmlDeviceGetGpuFabricInfo')\n"
    "h = N.nvmlDeviceGetHandleByIndex(0); seen = []\n"
    "end = time.monotonic() + 30\n"
    "while time.monotonic() < end and seen[-3:] != [3, 2, 3]:\n"
    "    i = I(); assert get(h, ctypes.byref(i)) == 0\n"
    "    if seen[-1:] != [i.state]:\n"
    "        seen.append(i.state); print('watch', i.state, flush=True)\n"
    "        if len(sys.argv) > 1: open(sys.argv[1], 'w').write(str(i.state))  # what it sees now\n"
    "    time.sleep(0.05)\n"
)


@pytest.mark.consumer
def test_mokka_run_fabric_state_follows_nv_fabricmanager(smi: Path, tmp_path: Path) -> None:
    """mokka run starts nv-fabricmanager (Completed); stopped, the fabric is In Progress; restarted, Completed."""
    consumers.pynvml()
    watch = tmp_path / "watch.py"
    watch.write_text(FABRIC_WATCH)
    state = "nvidia-smi -q -i 0 | grep -A1 '^    Fabric' | tail -1"
    marker = "$MOKKA_ROOT/var/lib/mokka/run/fabricmanager.ready"
    watching = tmp_path / "watching"

    def seen(fabric_state: str) -> str:  # until the watcher has seen it (at most 10 s)
        return f"for i in $(seq 200); do grep -qx {fabric_state} {watching} 2>/dev/null && break; sleep 0.05; done"

    script = (f"{state}; {sys.executable} {watch} {watching} & W=$!;"
              f" {seen('3')}; kill $(cat {marker}); {seen('2')}; {state};"
              f" nv-fabricmanager & F=$!; while [ ! -e {marker} ]; do sleep 0.1; done;"
              f" wait $W; {state}; kill $F; wait $F")
    done = _mokka_run(smi, "--profile", "h100", "--", "sh", "-c", script)
    assert done.returncode == 0, done.stdout + done.stderr
    shown = re.findall(r"State\s+: (.*)", done.stdout)
    assert shown == ["Completed", "In Progress", "Completed"], done.stdout
    assert re.findall(r"^watch (\d)$", done.stdout, re.M) == ["3", "2", "3"]  # one process, no re-render


@pytest.mark.consumer
def test_mokka_run_nvlink_error_injection(smi: Path) -> None:
    crc = "nvidia-smi nvlink -e -i 0 | grep -E 'Link (0|1): CRC'"
    script = (f"nvml-mock-ctl nvlink-error 0 500 --links 1 >/dev/null; sleep 0.5; {crc}; nvml-mock-ctl temp 2 50"
              f" >/dev/null; sleep 0.3; {crc}; nvml-mock-ctl nvlink-error 0 0 >/dev/null; {crc}; sleep 0.3; {crc}")
    done = _mokka_run(smi, "--profile", "h100", "--", "sh", "-c", script)
    assert done.returncode == 0, done.stdout + done.stderr
    link0 = [int(n) for n in re.findall(r"Link 0: CRC Errors: (\d+)", done.stdout)]
    link1 = [int(n) for n in re.findall(r"Link 1: CRC Errors: (\d+)", done.stdout)]
    assert link0 == [0, 0, 0, 0]
    assert 200 <= link1[0] < link1[1] <= link1[2] == link1[3]  # grows across runs and re-renders; 0 heals


def test_the_pci_bus_is_below_the_driver() -> None:
    """No GPU on the bus: the module does not load; the bus failed: every GPU fell off it (Xid 79)."""
    off = _kv(render_nvml_state(NodeSpec(profile="h100", surfaces={"pci": {"enabled": False}}).resolve()))
    assert off["system.init_error"] == "9"
    failed = _kv(render_nvml_state(NodeSpec(profile="h100", surfaces={"pci": {"state": "failed"}}).resolve()))
    assert failed["system.init_error"] == "0"
    assert all(failed[f"device.{i}.lost"] == "1" for i in range(8))
    events = sorted((int(failed[f"event.{n}.device"]), failed[f"event.{n}.data"]) for n in range(8))
    assert events == [(i, "79") for i in range(8)] and "event.8.seq" not in failed


def random_change(rng: random.Random, doc: dict, gpus: int) -> dict:
    """One change of the kinds nvml-mock-ctl makes: a reading, a fault, a process, a surface's state."""
    doc = copy.deepcopy(doc)
    device = doc.setdefault("devices", {}).setdefault(str(rng.randrange(gpus)), {})
    kind = rng.randrange(5)
    if kind == 0:
        device["thermal"] = {"temperature_gpu_c": rng.randrange(20, 90)}
    elif kind == 1:
        device["failure"] = {"mode": rng.choice(["healthy", "lost", "fallen_off_bus"])}
    elif kind == 2:
        device["processes"] = [{"pid": rng.randrange(100, 999), "name": "train", "used_memory_mib": 1024}]
    elif kind == 3:
        doc["surfaces"] = {rng.choice(["pci", "nvlink", "gpu"]): {"state": rng.choice(["healthy", "failed"])}}
    else:
        doc["surfaces"] = {"nvlink": {"enabled": rng.random() < 0.5}}
    return doc


@pytest.mark.parametrize("profile", ["h100", "gb200"])
def test_the_block_memo_renders_what_a_fresh_render_does(profile: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Device blocks are reused across renders where a GPU's inputs are the same: never a stale block."""
    rng = random.Random(profile)
    base = NodeSpec(profile=profile, gpus=8).resolve()
    memo = nvml_view._BlockMemo()
    doc: dict = {}
    reused = 0
    for step in range(60):
        doc = random_change(rng, doc, 8)
        node = apply(base, doc)
        contributed = [NvmlKeys(devices={rng.randrange(8): (("nvlink.0.state", rng.randrange(2)),)})]
        monkeypatch.setattr(nvml_view, "_BLOCKS", memo)
        kept = memo.rendered
        before = dict(kept.blocks) if kept is not None else {}
        remembered = render_nvml_state(node, contributed)
        reused += memo.rendered is kept and any(memo.rendered.blocks[i] is block for i, block in before.items())
        monkeypatch.setattr(nvml_view, "_BLOCKS", nvml_view._BlockMemo())
        assert remembered == render_nvml_state(node, contributed), f"step {step}: {doc}"
    assert reused, "the memo never kept a block: the test would not see a stale one"


def test_a_delayed_failure_is_left_to_nvml(tmp_path: Path) -> None:
    override = tmp_path / "override.yaml"
    override.write_text("version: 1\ndevices:\n  '2':\n    failure: {mode: fallen_off_bus, after_calls: 7, seed: -1}\n"
                        "  '5':\n    failure: {mode: ecc_uncorrectable, probability: 0.25, xid: {code: 94}}\n")
    node = NodeSpec(profile="h100", override_file=override).resolve()
    kv = dict(line.split("=", 1) for line in render_nvml_state(node).splitlines() if "=" in line)
    assert kv["device.2.lost"] == "0" and node.gpus[2].failure_mode == "healthy"  # until the calls start it
    assert [kv[f"device.2.failure.{k}"] for k in ("mode", "after_calls", "probability_ppb", "seed", "xid")] == [
        "2", "7", "1000000000", str((1 << 64) - 1), "79"]
    assert [kv[f"device.5.failure.{k}"] for k in ("mode", "after_calls", "probability_ppb", "seed", "xid")] == [
        "3", "0", "250000000", "0", "94"]
    assert kv["device.5.remapped_rows.failure"] == "0" and "device.5.ecc.volatile.uncorrected.dram" not in kv
    assert not any(key.startswith("event.") for key in kv)  # the Xid comes from NVML when the failure starts
    assert "device.0.failure.mode" not in kv
    from mokka_core.ctl.report import gpu_summary  # nvml-mock-ctl status says what is coming

    assert [gpu_summary(node.gpus[i])["faults"] for i in (2, 5, 0)] == [
        ["fallen_off_bus after NVML calls"], ["ecc_uncorrectable after NVML calls"], []]


def test_gpm_operation_mode_conf_compute_and_target_fan_speed(tmp_path: Path) -> None:
    def keys(profile: str, override: str = "") -> dict[str, str]:
        path = tmp_path / "override.yaml"
        path.write_text("version: 1\n" + override)
        node = NodeSpec(profile=profile, override_file=path if override else None).resolve()
        return dict(line.split("=", 1) for line in render_nvml_state(node).splitlines() if "=" in line)

    hopper, ampere = keys("h100"), keys("a100")
    assert (hopper["device.0.gpm.supported"], hopper["device.0.gpm.pcie_tx_mib_per_sec"]) == ("1", "2048")
    assert "device.0.gpm.supported" not in ampere  # GPM is Hopper and later
    assert "device.0.gpu_operation_mode.current" not in hopper  # N/A on every capture's board
    edited = keys("a100", "all:\n  gpm: {supported: true, pcie_rx_mib_per_sec: 100}\n"
                  "  gpu_operation_mode: {current: compute}\n  features: {confidential_compute: true}\n"
                  "  fan: {count: 1, speed_percent: 30, target_speed_percent: 45}\n")
    assert (edited["device.0.gpm.supported"], edited["device.0.gpm.pcie_rx_mib_per_sec"]) == ("1", "100")
    assert (edited["device.0.gpu_operation_mode.current"], edited["device.0.gpu_operation_mode.pending"]) == ("1", "1")
    assert edited["device.0.conf_compute.supported"] == "1"
    assert (edited["device.0.fan.speed"], edited["device.0.fan.target_speed"]) == ("30", "45")
    assert "device.0.fan.target_speed" not in ampere
