"""DCGM's NVML contract (native/README.md, "DCGM's NVML contract").

DCGM cannot run here; what it needs from NVML is a fact table, native/dcgm-nvml-calls.txt (the functions DCGM
4.6.0 calls). Each must be exported, and answer (not be a generated stub) unless README.md's table "DCGM calls that
stay NOT_SUPPORTED, and why" names it. dcgm-exporter's default counters (etc/default-counters.csv of
NVIDIA/dcgm-exporter) reach NVML through DCGM's field cache (dcgmlib/src/DcgmCacheManager.cpp): each is checked on
every GPU of every built-in profile against the board's real capture, a value where the capture shows one,
NOT_SUPPORTED where it prints N/A."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import NATIVE, ROOT, nvml_env
from mkstate import make_state, write_state

CALLS = [line.strip() for line in (NATIVE / "dcgm-nvml-calls.txt").read_text().splitlines()
         if line.strip() and not line.startswith("#")]
CAPTURES = ROOT / "reference" / "captures"
PROFILES = ("a100", "h100", "b200", "gb200", "gb300", "l40s", "t4")
STUB_RE = re.compile(r"^MK_API \S+ (nvml\w+)\(", re.M)


def not_supported_table() -> set[str]:
    """The function names in the first column of README.md's "DCGM calls that stay NOT_SUPPORTED" table."""
    text = (NATIVE / "README.md").read_text()
    start = text.index("### DCGM calls that stay NOT_SUPPORTED, and why")
    section = text[start:text.index("\n#", start + 1)]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    assert rows, "the table has rows"
    return {name for row in rows for name in re.findall(r"`(nvml\w+)`", row.split(" | ")[0])}


def exported(lib: Path) -> set[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], check=True, capture_output=True, text=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


def test_fact_table() -> None:
    assert len(CALLS) == len(set(CALLS)) == 276
    assert {"nvmlDeviceGetFieldValues", "nvmlSystemEventSetWait", "nvmlDeviceGetUnrepairableMemoryFlag"} <= set(CALLS)


def test_every_dcgm_call_is_exported(lib_dir: Path) -> None:
    missing = sorted(set(CALLS) - exported(lib_dir / "libnvidia-ml.so.1"))
    assert not missing, f"DCGM calls these, the library does not export them: {missing}"


def test_every_stub_dcgm_calls_is_documented(lib_dir: Path) -> None:
    stubs = set(STUB_RE.findall((NATIVE / "build" / "stubs_generated.c").read_text()))
    assert len(stubs) > 100, "the stub file was read"
    table = not_supported_table()
    undocumented = sorted(stubs & set(CALLS) - table)
    answering = sorted(table - stubs)
    assert not undocumented, f"DCGM calls these stubs; implement them or add them to the README table: {undocumented}"
    assert not answering, f"the README table names what is no longer a stub (or not a DCGM call): {answering}"
    assert table <= set(CALLS)


# ---------------------------------------------------------------- dcgm-exporter's default counters
NOT_SUPPORTED = 3
# The counters of dcgm-exporter's etc/default-counters.csv, each with the NVML call DCGM's cache manager makes
# for it and the capture element that shows whether the board has the feature (None: every board has it).
COUNTERS = {
    "DCGM_FI_DEV_SM_CLOCK": ("GetClockInfo(SM)", ["clocks/sm_clock"]),
    "DCGM_FI_DEV_MEM_CLOCK": ("GetClockInfo(MEM)", ["clocks/mem_clock"]),
    "DCGM_FI_DEV_MEMORY_TEMP": ("GetFieldValues(NVML_FI_DEV_MEMORY_TEMP)", ["temperature/memory_temp"]),
    "DCGM_FI_DEV_GPU_TEMP": ("GetTemperature(GPU)", ["temperature/gpu_temp"]),
    "DCGM_FI_DEV_POWER_USAGE": ("GetPowerUsage", ["gpu_power_readings/average_power_draw",
                                                  "gpu_power_readings/instant_power_draw"]),
    # nvml.h: "For Volta or newer fully supported devices" (nvidia-smi -q does not print it)
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("GetTotalEnergyConsumption", None),
    # DCGM 4.x answers these itself (NOT_SUPPORTED); DCGM before it read GetPcieThroughput, which DCGM still calls
    "DCGM_FI_DEV_PCIE_TX_THROUGHPUT": ("GetPcieThroughput(TX)", ["pci/tx_util"]),
    "DCGM_FI_DEV_PCIE_RX_THROUGHPUT": ("GetPcieThroughput(RX)", ["pci/rx_util"]),
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": ("GetPcieReplayCounter", ["pci/replay_counter"]),
    "DCGM_FI_DEV_GPU_UTIL": ("GetUtilizationRates", ["utilization/gpu_util"]),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("GetUtilizationRates", ["utilization/memory_util"]),
    "DCGM_FI_DEV_ENC_UTIL": ("GetEncoderUtilization", ["utilization/encoder_util"]),
    "DCGM_FI_DEV_DEC_UTIL": ("GetDecoderUtilization", ["utilization/decoder_util"]),
    # DCGM's event thread: an Xid event set on every GPU (nvml.h: Xid events on all products)
    "DCGM_FI_DEV_XID_ERRORS": ("RegisterEvents(XidCriticalError)", None),
    "DCGM_FI_DEV_FB_FREE": ("GetMemoryInfo_v2", ["fb_memory_usage/free"]),
    "DCGM_FI_DEV_FB_USED": ("GetMemoryInfo_v2", ["fb_memory_usage/used"]),
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": ("GetFieldValues(NVLINK_THROUGHPUT_DATA_RX/TX, all links)", "nvlink"),
    # the bare-metal driver answers (licensing not supported): dcgm-exporter on bare-metal nodes prints the counter
    # as 0 (NVIDIA/dcgm-exporter issue 317, an A30 node), where a NOT_SUPPORTED value would be skipped
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS": ("GetGridLicensableFeatures", None),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": ("GetRemappedRows", ["remapped_rows/remapped_row_unc", "remapped_rows"]),
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": ("GetRemappedRows", ["remapped_rows/remapped_row_corr", "remapped_rows"]),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": ("GetRemappedRows", ["remapped_rows/remapped_row_failure", "remapped_rows"]),
}
# nvidia-smi -q prints no NVLink section: the boards with NVLink, from their datasheets (A100 SXM4 12 links,
# H100 SXM5 18, B200/GB200/GB300 18 NVLink 5); the L40S and the T4 are PCIe-only boards
NVLINK_BOARDS = {"a100", "h100", "b200", "gb200", "gb300"}

CALLER = textwrap.dedent("""
    import ctypes, json, sys
    L = ctypes.CDLL("libnvidia-ml.so.1")
    U, ULL = ctypes.c_uint, ctypes.c_ulonglong
    class Value(ctypes.Union):
        _fields_ = [("d", ctypes.c_double), ("ui", U), ("ul", ctypes.c_ulong), ("ull", ULL), ("sll", ctypes.c_longlong),
                    ("si", ctypes.c_int), ("us", ctypes.c_ushort)]
    class Field(ctypes.Structure):
        _fields_ = [("fieldId", U), ("scopeId", U), ("timestamp", ctypes.c_longlong),
                    ("latencyUsec", ctypes.c_longlong), ("valueType", ctypes.c_int), ("nvmlReturn", ctypes.c_int),
                    ("value", Value)]
    class Memory(ctypes.Structure):
        _fields_ = [("version", U), ("total", ULL), ("reserved", ULL), ("free", ULL), ("used", ULL)]
    def fields(d, *ids):
        fv = (Field * len(ids))()
        for f, (fid, scope) in zip(fv, ids):
            f.fieldId, f.scopeId = fid, scope
        r = L.nvmlDeviceGetFieldValues(d, len(ids), fv)
        return [r or f.nvmlReturn for f in fv]
    def ref(*t):
        return [ctypes.byref(x) for x in t]
    assert L.nvmlInit_v2() == 0
    n = U(); assert L.nvmlDeviceGetCount_v2(ctypes.byref(n)) == 0
    out = []
    for i in range(n.value):
        d = ctypes.c_void_p(); assert L.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(d)) == 0
        u, u2, u3, u4, ull = U(), U(), U(), U(), ULL()
        mem = Memory(version=0x02000028)
        events = ctypes.c_void_p(); assert L.nvmlEventSetCreate(ctypes.byref(events)) == 0
        supported = ULL(); assert L.nvmlDeviceGetSupportedEventTypes(d, ctypes.byref(supported)) == 0
        rows = L.nvmlDeviceGetRemappedRows(d, *ref(u, u2, u3, u4))
        rx, tx = fields(d, (139, 0xFFFFFFFF), (138, 0xFFFFFFFF))
        xid = L.nvmlDeviceRegisterEvents(d, 8, events) or (0 if supported.value & 8 else -1)
        licence = ctypes.create_string_buffer(8192)
        rc = {
            "GetClockInfo(SM)": L.nvmlDeviceGetClockInfo(d, 1, *ref(u)),
            "GetClockInfo(MEM)": L.nvmlDeviceGetClockInfo(d, 2, *ref(u)),
            "GetFieldValues(NVML_FI_DEV_MEMORY_TEMP)": fields(d, (82, 0))[0],
            "GetTemperature(GPU)": L.nvmlDeviceGetTemperature(d, 0, *ref(u)),
            "GetPowerUsage": L.nvmlDeviceGetPowerUsage(d, *ref(u)),
            "GetTotalEnergyConsumption": L.nvmlDeviceGetTotalEnergyConsumption(d, *ref(ull)),
            "GetPcieThroughput(TX)": L.nvmlDeviceGetPcieThroughput(d, 0, *ref(u)),
            "GetPcieThroughput(RX)": L.nvmlDeviceGetPcieThroughput(d, 1, *ref(u)),
            "GetPcieReplayCounter": L.nvmlDeviceGetPcieReplayCounter(d, *ref(u)),
            "GetUtilizationRates": L.nvmlDeviceGetUtilizationRates(d, ctypes.byref((U * 2)())),
            "GetEncoderUtilization": L.nvmlDeviceGetEncoderUtilization(d, *ref(u, u2)),
            "GetDecoderUtilization": L.nvmlDeviceGetDecoderUtilization(d, *ref(u, u2)),
            "RegisterEvents(XidCriticalError)": xid,
            "GetMemoryInfo_v2": L.nvmlDeviceGetMemoryInfo_v2(d, ctypes.byref(mem)),
            "GetFieldValues(NVLINK_THROUGHPUT_DATA_RX/TX, all links)": rx or tx,
            "GetGridLicensableFeatures": L.nvmlDeviceGetGridLicensableFeatures_v4(d, licence),
            "GetRemappedRows": rows,
        }
        L.nvmlEventSetFree(events)
        out.append(rc)
    print(json.dumps(out))
""")


def board_has(shape: str, feature: list[str] | str | None) -> bool:
    if feature is None:
        return True
    if feature == "nvlink":
        return shape in NVLINK_BOARDS
    gpu = ET.parse(CAPTURES / f"qx-{shape}.xml").getroot().find("gpu")
    assert gpu is not None
    texts = [(el.text or "").strip() for path in feature if (el := gpu.find(path)) is not None]
    assert texts, f"qx-{shape}.xml has none of {feature}"
    return any(t and t != "N/A" for t in texts)


@pytest.mark.parametrize("shape", PROFILES)
def test_dcgm_exporter_default_counters(lib_dir: Path, tmp_path: Path, shape: str) -> None:
    state = tmp_path / "mokka-nvml.state"
    write_state(state, make_state(shape))
    p = subprocess.run([sys.executable, "-c", CALLER], env=nvml_env(lib_dir, state), capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr[-3000:]
    gpus = json.loads(p.stdout)
    assert gpus
    wrong = {}
    for counter, (call, feature) in COUNTERS.items():
        expected = 0 if board_has(shape, feature) else NOT_SUPPORTED
        got = sorted({gpu[call] for gpu in gpus})
        if got != [expected]:
            wrong[counter] = f"{call}: expected {expected}, got {got}"
    assert not wrong, f"{shape}: {wrong}"
