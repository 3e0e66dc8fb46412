"""Node-wide PCIe levels (NICs in topo -m), GPU NUMA ids, lost GPUs named by bus id, fabric state
following the fabric manager's marker, and NVLink error injection: library and real nvidia-smi."""
from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from conftest import consumers, nvml_env
from mkstate import make_state, write_state
from test_library import run as run_ctypes
from test_nvidia_smi import run_smi

# GPUs 0-3 on root complex 0 (NUMA 0), 4-7 on root complex 1 (NUMA 1); GPU i behind PCIe switch i
NODE = {f"device.{i}.{k}": v for i in range(8)
        for k, v in (("root_complex", i // 4), ("pcie_switch", i))}
# HCAs: one beside GPU 0, one beside GPU 1, one on a third root complex of NUMA 0, one on NUMA 1
NICS = {"pcifn.0.bus_id": "00000000:19:00.0", "pcifn.0.root_complex": 0, "pcifn.0.pcie_switch": 0,
        "pcifn.0.numa_node": 0,
        "pcifn.1.bus_id": "0000:1c:00.0", "pcifn.1.root_complex": 0, "pcifn.1.pcie_switch": 1, "pcifn.1.numa_node": 0,
        "pcifn.2.bus_id": "00000000:30:00.0", "pcifn.2.root_complex": 2, "pcifn.2.numa_node": 0,
        "pcifn.3.bus_id": "00000000:C9:00.0", "pcifn.3.root_complex": 1, "pcifn.3.numa_node": 1}


def test_slot23_levels_for_every_pci_function_and_slot81_bus_ids(lib_dir, state_file):
    st = state_file("h100", overrides={**NODE, **NICS, "device.3.lost": 1})
    run_ctypes(lib_dir, st, """
        L.nvmlInit_v2()
        t = ctypes.POINTER(ctypes.c_void_p)()
        assert L.nvmlInternalGetExportTable(ctypes.byref(t), bytes.fromhex("c4fe3e6cc98f6c4ea327ee696e12f7c4")) == 0
        f23 = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int))(t[23])
        def level(a, b):
            out = ctypes.c_int(-1)
            r = f23(a.encode(), b.encode(), ctypes.byref(out))
            return r if r else out.value
        PXB, PHB, NODE, SYS = 1, 2, 3, 4
        assert level("00000000:1B:00.0", "0000:19:00.0") == PXB      # GPU 0 and its own NIC
        assert level("0000:19:00.0", "00000000:1B:00.0") == PXB      # NIC row
        assert level("00000000:1B:00.0", "00000000:1C:00.0") == PHB  # GPU 1's NIC, same root complex
        assert level("00000000:1B:00.0", "00000000:30:00.0") == NODE
        assert level("00000000:1B:00.0", "00000000:C9:00.0") == SYS
        assert level("00000000:DF:00.0", "00000000:C9:00.0") == PHB
        assert level("00000000:19:00.0", "00000000:1C:00.0") == PHB  # NIC <-> NIC
        assert level("00000000:30:00.0", "00000000:C9:00.0") == SYS
        assert level("00000000:1B:00.0", "00000000:43:00.0") == 4 + 18  # GPU <-> GPU: NV18 as before
        assert level("00000000:1B:00.0", "00000000:77:00.0") == 6     # NOT_FOUND
        f81 = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_uint)(t[81])
        buf = ctypes.create_string_buffer(34)
        assert f81(3, buf, 34) == 0 and buf.value == b"0000:61:00.0"  # known for a lost GPU too
        assert f81(8, buf, 34) == 2 and f81(0, buf, 5) == 7
    """)


def test_lost_gpu_is_named_by_its_bus_id(smi, lib_dir, state_file):
    st = state_file("h100", overrides={"device.3.lost": 1})
    p = run_smi(smi, lib_dir, st, [])
    assert "Unable to determine the device handle for GPU0000:61:00.0: GPU is lost." in p.stdout, p.stdout
    assert p.returncode == 15
    listed = run_smi(smi, lib_dir, st, ["-L"])  # -L and --query-gpu carry on with the other GPUs
    assert listed.stdout.count("GPU-") == 7


def topo_rows(out: str) -> dict[str, dict[str, str]]:
    """topo -m's matrix: row name -> column name -> cell (empty cells dropped: the affinity columns
    are separated by a variable number of tabs)."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in out.splitlines()]
    header = [h.strip() for h in lines[0].split("\t")[1:] if h.strip()]
    rows = {}
    for line in lines[1:]:
        if not line.strip():
            break
        name, *cells = line.split("\t")
        rows[name.strip()] = dict(zip(header, (c.strip() for c in cells if c.strip()), strict=False))
    return rows


def test_gpu_numa_id_column(smi, lib_dir, state_file):
    x86 = run_smi(smi, lib_dir, state_file("h100"), ["topo", "-m"])
    assert x86.returncode == 0, x86.stdout
    rows = topo_rows(x86.stdout)
    assert [rows[f"GPU{i}"]["GPU NUMA ID"] for i in range(8)] == ["N/A"] * 8
    assert rows["GPU0"]["NUMA Affinity"] == "0" and rows["GPU7"]["NUMA Affinity"] == "1"
    grace = {f"device.{i}.gpu_numa_node": 2 + 8 * i for i in range(4)}
    coherent = run_smi(smi, lib_dir, state_file("h100", n=4, overrides=grace), ["topo", "-m"])
    assert coherent.returncode == 0, coherent.stdout
    rows = topo_rows(coherent.stdout)
    assert [rows[f"GPU{i}"]["GPU NUMA ID"] for i in range(4)] == ["2", "10", "18", "26"]


FABRIC_WATCH = textwrap.dedent("""
    import ctypes, sys, time
    import pynvml as N
    class Info(ctypes.Structure):  # nvmlGpuFabricInfo_t of nvml.h (12.550's pynvml declares another layout)
        _fields_ = [("clusterUuid", ctypes.c_char * 16), ("status", ctypes.c_uint), ("cliqueId", ctypes.c_uint),
                    ("state", ctypes.c_ubyte)]
    N.nvmlInit()
    get = N._nvmlGetFunctionPointer("nvmlDeviceGetGpuFabricInfo")
    h = N.nvmlDeviceGetHandleByIndex(0)
    last = None
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        info = Info()
        assert get(h, ctypes.byref(info)) == 0
        if info.state != last:
            last = info.state
            print(last, flush=True)
        if last == 3:
            break
        time.sleep(0.02)
""")


def fabric_state(smi: Path, lib_dir: Path, state: Path) -> str:
    p = run_smi(smi, lib_dir, state, ["-q", "-i", "0"])
    assert p.returncode == 0, p.stdout
    return re.search(r"Fabric\n\s+State\s+: (.*)\n", p.stdout).group(1)


def test_fabric_state_follows_the_ready_marker_at_runtime(smi, lib_dir, state_file, tmp_path):
    consumers.pynvml()
    marker = tmp_path / "run" / "fabricmanager.ready"
    auto = {f"device.{i}.{k}": v for i in range(8) for k, v in (("fabric.state", 2), ("fabric.auto", 1))}
    st = state_file("h100", overrides={**auto, "system.fabric_ready_file": str(marker)})
    assert fabric_state(smi, lib_dir, st) == "In Progress"
    watcher = subprocess.Popen([sys.executable, "-c", FABRIC_WATCH], env=nvml_env(lib_dir, st),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert watcher.stdout is not None and watcher.stdout.readline().strip() == "2"  # in progress
        marker.parent.mkdir()
        marker.write_text("1\n")  # the fabric manager is ready; the state file is not touched
        started = time.monotonic()
        out, err = watcher.communicate(timeout=30)
        assert out.split() == ["3"], err  # completed, in the same process
        assert time.monotonic() - started < 2.0
    finally:
        watcher.kill()
    assert fabric_state(smi, lib_dir, st) == "Completed"
    marker.unlink()  # the daemon stopped: back to in progress
    assert fabric_state(smi, lib_dir, st) == "In Progress"



def test_a_relative_ready_marker_is_the_one_beside_the_resolved_state_file(smi, lib_dir, state_file, tmp_path):
    """A container given the node's root elsewhere (/opt/mokka), or a link to the state file (mokka run's real
    paths): the marker is looked up relative to the state file's real directory, so it is the node's own."""
    auto = {f"device.{i}.{k}": v for i in range(8) for k, v in (("fabric.state", 2), ("fabric.auto", 1))}
    written = state_file("h100", overrides={**auto, "system.fabric_ready_file": "../run/fabricmanager.ready"})
    real = tmp_path / "node/lib" / written.name
    real.parent.mkdir(parents=True)
    written.rename(real)
    view = tmp_path / "view/lib" / written.name
    view.parent.mkdir(parents=True)
    view.symlink_to(real)
    (tmp_path / "view/run").mkdir()
    (tmp_path / "view/run/fabricmanager.ready").write_text("1\n")  # beside the link: not the node's marker
    assert fabric_state(smi, lib_dir, view) == "In Progress"
    (tmp_path / "node/run").mkdir()
    (tmp_path / "node/run/fabricmanager.ready").write_text("1\n")
    assert fabric_state(smi, lib_dir, view) == "Completed"

def nvlink_errors(smi: Path, lib_dir: Path, state: Path) -> dict[int, tuple[int, int, int]]:
    p = run_smi(smi, lib_dir, state, ["nvlink", "-e", "-i", "0"])
    assert p.returncode == 0, p.stdout
    counts: dict[int, dict[str, int]] = {}
    for link, kind, n in re.findall(r"Link (\d+): (Replay|Recovery|CRC) Errors: (\d+)", p.stdout):
        counts.setdefault(int(link), {})[kind] = int(n)
    return {link: (c["Replay"], c["Recovery"], c["CRC"]) for link, c in counts.items()}


def test_nvlink_error_injection_grows_across_processes_and_heals(smi, lib_dir, tmp_path):
    state = tmp_path / "mokka-nvml.state"
    epoch = time.time_ns() // 1_000_000 - 10_000  # 10 s ago, at 100 errors/s on links 1 and 4
    injecting = {"device.0.nvlink_error.rate_milli": 100_000, "device.0.nvlink_error.epoch_ms": epoch,
                 "device.0.nvlink.1.errors.inject": 1, "device.0.nvlink.4.errors.inject": 1,
                 "device.0.nvlink.4.errors.injected": 500}
    write_state(state, make_state("h100", overrides=injecting))
    first = nvlink_errors(smi, lib_dir, state)
    assert first[0] == (0, 0, 0) and first[2] == (0, 0, 0)
    assert 1000 <= first[1][2] < 1500 and first[1][0] == first[1][2] and first[1][1] == 0
    assert first[4][2] - first[1][2] == 500
    time.sleep(0.3)
    second = nvlink_errors(smi, lib_dir, state)  # another process, later: more errors, never fewer
    assert second[1][2] >= first[1][2] + 20 and second[4][2] - second[1][2] == 500
    run_ctypes(lib_dir, state, """
        L.nvmlInit_v2()
        v = ctypes.c_ulonglong()
        assert L.nvmlDeviceGetNvLinkErrorCounter(h(0)[1], 1, 2, ctypes.byref(v)) == 0 and v.value >= 1000  # CRC flit
        assert L.nvmlDeviceGetNvLinkErrorCounter(h(0)[1], 0, 2, ctypes.byref(v)) == 0 and v.value == 0
        assert L.nvmlDeviceGetNvLinkErrorCounter(h(1)[1], 1, 0, ctypes.byref(v)) == 0 and v.value == 0
    """)
    healed = {**injecting, "device.0.nvlink_error.rate_milli": 0, "device.0.nvlink.1.errors.inject": None,
              "device.0.nvlink.4.errors.inject": None, "device.0.nvlink.1.errors.injected": 1234}
    write_state(state, make_state("h100", overrides=healed))
    frozen = nvlink_errors(smi, lib_dir, state)
    time.sleep(0.2)
    assert nvlink_errors(smi, lib_dir, state) == frozen and frozen[1] == (1234, 0, 1234)
