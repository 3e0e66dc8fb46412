"""The 13.x API's platform getters, through ctypes with nvml.h 13.5.37's layouts, on the boards' state files.

Expected values are the real boards' (``reference/captures/qx-<board>.xml``, drivers 570–595):
``addressing_mode`` ATS on GB200/GB300 (Grace C2C), HMM on the x86 boards but B200 (None: that host ran
with HMM off, and the b200 profile says so); ``capabilities/egm`` disabled on
all seven; ``platformInfo`` filled on the Blackwell boards (``host_id`` 1, ``peer_type`` "Switch Connected")
and N/A elsewhere (nvml.h: "For Blackwell or newer fully supported devices"); a ``pdi`` on every GPU.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import nvml_env

PRELUDE = textwrap.dedent("""
    import ctypes, sys
    sys.path.insert(0, %(tests)r)
    from mkstate import rendered
    L = ctypes.CDLL("libnvidia-ml.so.1")
    U = ctypes.c_uint

    def version(struct, v):  # NVML_STRUCT_VERSION
        return ctypes.sizeof(struct) | v << 24

    class Pdi(ctypes.Structure):
        _fields_ = [("version", U), ("value", ctypes.c_ulonglong)]

    class Versioned(ctypes.Structure):  # nvmlDeviceAddressingMode_v1_t, nvmlDeviceCapabilities_v1_t
        _fields_ = [("version", U), ("value", U)]

    class PlatformInfo(ctypes.Structure):  # nvmlPlatformInfo_v2_t (v1: rackGuid in place of the serial)
        _fields_ = [("version", U), ("ibGuid", ctypes.c_ubyte * 16), ("chassisSerialNumber", ctypes.c_char * 16),
                    ("slotNumber", ctypes.c_ubyte), ("trayIndex", ctypes.c_ubyte), ("hostId", ctypes.c_ubyte),
                    ("peerType", ctypes.c_ubyte), ("moduleId", ctypes.c_ubyte)]

    assert L.nvmlInit_v2() == 0
    n = U(); L.nvmlDeviceGetCount_v2(ctypes.byref(n))
    handles = []
    for i in range(n.value):
        d = ctypes.c_void_p(); assert L.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(d)) == 0; handles.append(d)

    def get(fn, d, struct, v):
        s = struct(); s.version = version(struct, v)
        return getattr(L, fn)(d, ctypes.byref(s)), s
""")
SUCCESS, INVALID_ARGUMENT, NOT_SUPPORTED, ARGUMENT_VERSION_MISMATCH = 0, 2, 3, 25
NONE, HMM, ATS = 0, 1, 2
SWITCH_CONNECTED = 2


def run(lib_dir: Path, state: Path, body: str) -> None:
    code = PRELUDE % {"tests": str(Path(__file__).parent)} + textwrap.dedent(body)
    p = subprocess.run([sys.executable, "-c", code], env=nvml_env(lib_dir, state), capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, f"stdout:{p.stdout}\nstderr:{p.stderr}"


@pytest.mark.parametrize(("board", "mode"), [("gb200", ATS), ("gb300", ATS), ("h100", HMM), ("b200", NONE),
                                             ("a100", HMM), ("l40s", HMM), ("t4", HMM)])
def test_addressing_mode_and_capabilities(lib_dir, state_file, board: str, mode: int) -> None:
    run(lib_dir, state_file(board), f"""
        for d in handles:
            r, m = get("nvmlDeviceGetAddressingMode", d, Versioned, 1); assert (r, m.value) == (0, {mode}), (r, m.value)
            r, c = get("nvmlDeviceGetCapabilities", d, Versioned, 1); assert (r, c.value) == (0, 0), (r, c.value)
        r, m = get("nvmlDeviceGetAddressingMode", handles[0], Versioned, 2); assert r == {ARGUMENT_VERSION_MISMATCH}
        r, c = get("nvmlDeviceGetCapabilities", handles[0], Versioned, 2); assert r == {ARGUMENT_VERSION_MISMATCH}
        assert L.nvmlDeviceGetAddressingMode(handles[0], None) == {INVALID_ARGUMENT}
    """)


def test_pdi_is_one_per_gpu_and_stable(lib_dir, state_file) -> None:
    run(lib_dir, state_file("h100"), f"""
        kv = dict(rendered("h100"))
        values = []
        for i, d in enumerate(handles):
            r, p = get("nvmlDeviceGetPdi", d, Pdi, 1); assert r == 0
            assert p.value == int(kv[f"device.{{i}}.pdi"], 16) != 0
            values.append(p.value)
        assert len(set(values)) == len(values)
        r, p = get("nvmlDeviceGetPdi", handles[0], Pdi, 2); assert r == {ARGUMENT_VERSION_MISMATCH}
    """)
    st = state_file("h100", overrides={"device.0.pdi": None})  # a driver without it (the 570 A100 capture)
    run(lib_dir, st, f"""
        r, p = get("nvmlDeviceGetPdi", handles[0], Pdi, 1); assert (r, p.value) == ({NOT_SUPPORTED}, 0)
    """)


@pytest.mark.parametrize("board", ["gb200", "gb300"])
def test_platform_info_of_a_rack(lib_dir, state_file, board: str) -> None:
    run(lib_dir, state_file(board), f"""
        kv = dict(rendered({board!r}))
        for i, d in enumerate(handles):
            r, p = get("nvmlDeviceGetPlatformInfo", d, PlatformInfo, 2); assert r == 0, r
            assert p.chassisSerialNumber.decode() == kv[f"device.{{i}}.platform.chassis_serial"] != ""
            assert (p.slotNumber, p.trayIndex) == (int(kv[f"device.{{i}}.platform.slot_number"]),
                                                   int(kv[f"device.{{i}}.platform.tray_index"]))
            assert (p.hostId, p.peerType) == (1, {SWITCH_CONNECTED})
            module = U(); assert L.nvmlDeviceGetModuleId(d, ctypes.byref(module)) == 0
            assert p.moduleId == module.value != 0
            r, p1 = get("nvmlDeviceGetPlatformInfo", d, PlatformInfo, 1); assert r == 0
            assert p1.chassisSerialNumber == b"" and p1.hostId == 1  # v1: rackGuid, not reported
        r, p = get("nvmlDeviceGetPlatformInfo", handles[0], PlatformInfo, 3); assert r == {ARGUMENT_VERSION_MISMATCH}
    """)


def test_platform_info_of_a_b200_baseboard(lib_dir, state_file) -> None:
    """qx-b200.xml: an empty chassis serial, slot and tray N/A, host 1, switch connected."""
    run(lib_dir, state_file("b200"), """
        r, p = get("nvmlDeviceGetPlatformInfo", handles[0], PlatformInfo, 2); assert r == 0, r
        assert (p.chassisSerialNumber, p.slotNumber, p.trayIndex, p.hostId, p.peerType) == (b"", 0, 0, 1, 2)
    """)


@pytest.mark.parametrize("board", ["a100", "h100", "l40s", "t4"])
def test_platform_info_before_blackwell_is_not_supported(lib_dir, state_file, board: str) -> None:
    run(lib_dir, state_file(board), f"""
        r, p = get("nvmlDeviceGetPlatformInfo", handles[0], PlatformInfo, 2); assert r == {NOT_SUPPORTED}, r
        assert p.hostId == 0 and p.moduleId == 0
    """)


def test_supported_pstates_size_is_in_bytes(lib_dir, state_file) -> None:
    """nvml.h: "size: Size of the supplied pstates array in bytes"; pynvml passes 16 × 4 bytes."""
    run(lib_dir, state_file("h100"), """
        UNKNOWN, GUARD = 32, 0xDEAD
        a = (U * 6)(*[GUARD] * 6)
        assert L.nvmlDeviceGetSupportedPerformanceStates(handles[0], a, 4 * 4) == 0
        assert list(a) == [0, UNKNOWN, UNKNOWN, UNKNOWN, GUARD, GUARD], list(a)
        assert L.nvmlDeviceGetSupportedPerformanceStates(handles[0], a, 3) == 7  # INSUFFICIENT_SIZE
    """)


REPAIR_BOARDS = {"a100": True, "h100": True, "b200": True, "gb200": True, "gb300": True, "l40s": True, "t4": False}
UNREPAIRABLE_BOARDS = {"a100": False, "h100": True, "b200": True, "gb200": True, "gb300": True, "l40s": False,
                       "t4": False}


@pytest.mark.parametrize("board", list(REPAIR_BOARDS))
def test_repair_and_memory_health(lib_dir, state_file, board: str) -> None:
    """``tpc_repair_pending``/``channel_repair_pending`` No on every Ampere-or-newer capture (nvml.h: Ampere+), absent
    on the T4's; ``unrepairable_memory`` No on GB200/GB300, N/A on the L40S (nvml.h: Hopper+); clock monitors
    (nvml.h: Ampere+) report no fault."""
    repair, unrepairable = REPAIR_BOARDS[board], UNREPAIRABLE_BOARDS[board]
    run(lib_dir, state_file(board), f"""
        class Repair(ctypes.Structure):
            _fields_ = [("version", U), ("channel", U), ("tpc", U)]
        d = handles[0]
        r, s = get("nvmlDeviceGetRepairStatus", d, Repair, 1)
        assert (r, s.channel, s.tpc) == ((0, 0, 0) if {repair} else ({NOT_SUPPORTED}, 0, 0)), (r, s.channel, s.tpc)
        r, s = get("nvmlDeviceGetRepairStatus", d, Repair, 2); assert r == {ARGUMENT_VERSION_MISMATCH}
        flag = U(7)
        r = L.nvmlDeviceGetUnrepairableMemoryFlag_v1(d, ctypes.byref(flag))
        assert (r, flag.value) == ((0, 0) if {unrepairable} else ({NOT_SUPPORTED}, 7)), (r, flag.value)
        clkmon = (U * 66)(*[7] * 66)  # nvmlClkMonStatus_t: status, list size, 32 {{domain, mask}}
        r = L.nvmlDeviceGetClkMonStatus(d, clkmon)
        assert (r, clkmon[0], clkmon[1]) == ((0, 0, 0) if {repair} else ({NOT_SUPPORTED}, 7, 7))
    """)


def test_remapped_rows_v2_reads_the_v1_counters(lib_dir, state_file) -> None:
    """qx-h100.xml ``remapped_rows``: 0 correctable, 0 uncorrectable, not pending, no failure; and what is injected."""
    overrides = {"device.1.remapped_rows.correctable": 3, "device.1.remapped_rows.uncorrectable": 2,
                 "device.1.remapped_rows.pending": 1}
    run(lib_dir, state_file("h100", overrides=overrides), """
        rows = lambda d: (lambda a: (L.nvmlDeviceGetRemappedRows_v2(d, a), list(a)))((U * 6)(*[9] * 6))
        assert rows(handles[0]) == (0, [0, 0, 0, 0, 0, 0])
        assert rows(handles[1]) == (0, [3, 0, 2, 0, 1, 0])
        v1 = [U() for _ in range(4)]
        assert L.nvmlDeviceGetRemappedRows(handles[1], *map(ctypes.byref, v1)) == 0
        assert [u.value for u in v1] == [3, 2, 1, 0]
    """)
    run(lib_dir, state_file("t4"), f"""
        assert L.nvmlDeviceGetRemappedRows_v2(handles[0], (U * 6)()) == {NOT_SUPPORTED}
    """)


@pytest.mark.parametrize(("board", "cliques"), [("h100", 2), ("gb200", 4)])
def test_fabric_info_v3_and_v4(lib_dir, state_file, board: str, cliques: int) -> None:
    """qx-gb200.xml ``fabric``: Completed, Success, health summary Healthy; v4's cliques per nvml.h (Hopper: the
    unicast and multicast pointer cliques, Blackwell also the logical-endpoint ones), sorted by type."""
    run(lib_dir, state_file(board), f"""
        kv = dict(rendered({board!r}))
        class V3(ctypes.Structure):
            _fields_ = [("version", U), ("clusterUuid", ctypes.c_ubyte * 16), ("status", U), ("cliqueId", U),
                        ("state", U), ("healthMask", U), ("healthSummary", ctypes.c_ubyte)]
        class Clique(ctypes.Structure):
            _fields_ = [("type", ctypes.c_ubyte), ("id", U)]
        class V4(ctypes.Structure):
            _fields_ = [("clusterUuid", ctypes.c_ubyte * 16), ("status", U), ("cliques", Clique * 64),
                        ("numCliques", U), ("state", U), ("healthMask", U), ("healthSummary", ctypes.c_ubyte)]
        COMPLETED, HEALTHY = 3, 1
        d = handles[0]
        r, f = get("nvmlDeviceGetGpuFabricInfoV", d, V3, 3); assert r == 0, r
        assert (f.state, f.status, f.healthSummary) == (COMPLETED, 0, HEALTHY)
        assert f.healthMask == int(kv["device.0.fabric.health_mask"])
        f4 = V4()
        assert L.nvmlDeviceGetGpuFabricInfo_v4(d, ctypes.byref(f4)) == 0
        assert (f4.state, f4.status, f4.healthSummary, f4.healthMask) == (COMPLETED, 0, HEALTHY, f.healthMask)
        assert bytes(f4.clusterUuid) == bytes(f.clusterUuid)
        got = [(f4.cliques[i].type, f4.cliques[i].id) for i in range(f4.numCliques)]
        assert got == [(t, f.cliqueId) for t in range({cliques})], got
        r, f = get("nvmlDeviceGetGpuFabricInfoV", d, V3, 4); assert r == {ARGUMENT_VERSION_MISMATCH}
    """)
    run(lib_dir, state_file(board, overrides={"device.0.fabric.health_mask": 1 | 2 << 2 | 2 << 4 | 2 << 6 | 1 << 8}),
        """
        class V3(ctypes.Structure):
            _fields_ = [("version", U), ("clusterUuid", ctypes.c_ubyte * 16), ("status", U), ("cliqueId", U),
                        ("state", U), ("healthMask", U), ("healthSummary", ctypes.c_ubyte)]
        LIMITED_CAPACITY = 3  # bandwidth degraded
        r, f = get("nvmlDeviceGetGpuFabricInfoV", handles[0], V3, 3)
        assert (r, f.healthSummary) == (0, LIMITED_CAPACITY)
    """)


def test_samples_are_what_the_getters_report(lib_dir, state_file) -> None:
    """nvmlDeviceGetSamples: NULL samples asks for the count; one sample, stamped now (µs), of the getter's value."""
    run(lib_dir, state_file("h100"), f"""
        import time
        class Sample(ctypes.Structure):
            _fields_ = [("timeStamp", ctypes.c_ulonglong), ("value", ctypes.c_ulonglong)]
        POWER, GPU_UTIL, MEM_UTIL, ENC, PROCESSOR_CLK, MEMORY_CLK, MODULE_POWER = 0, 1, 2, 3, 5, 6, 7
        UINT = 1
        d = handles[0]
        def samples(kind, last=0):
            t, n, buf = U(9), U(4), (Sample * 4)()
            r = L.nvmlDeviceGetSamples(d, kind, ctypes.c_ulonglong(last), ctypes.byref(t), ctypes.byref(n), buf)
            return r, t.value, [(s.timeStamp, s.value) for s in buf[:n.value]]
        def getter(fn, *args):
            v = U(); assert getattr(L, fn)(d, *args, ctypes.byref(v)) == 0; return v.value
        t, n = U(), U()
        assert L.nvmlDeviceGetSamples(d, POWER, ctypes.c_ulonglong(0), ctypes.byref(t), ctypes.byref(n), None) == 0
        assert (t.value, n.value) == (UINT, 1)
        before = int(time.time() * 1e6)
        r, kind, got = samples(POWER); assert (r, kind) == (0, UINT) and len(got) == 1
        assert before <= got[0][0] <= int(time.time() * 1e6) + 1 and got[0][1] == getter("nvmlDeviceGetPowerUsage")
        assert samples(PROCESSOR_CLK)[2][0][1] == getter("nvmlDeviceGetClockInfo", 0) == 345
        assert samples(MEMORY_CLK)[2][0][1] == getter("nvmlDeviceGetClockInfo", 2)
        assert samples(GPU_UTIL)[2][0][1] == 0 and samples(MEM_UTIL)[2][0][1] == 0 and samples(ENC)[2][0][1] == 0
        assert samples(POWER, last=got[0][0] + 10**9)[0] == 6                 # NOT_FOUND: nothing newer
        assert samples(MODULE_POWER)[0] == {NOT_SUPPORTED} and samples(10)[0] == {INVALID_ARGUMENT}
        zero = U(0)
        assert L.nvmlDeviceGetSamples(d, POWER, ctypes.c_ulonglong(0), ctypes.byref(t), ctypes.byref(zero),
                                      (Sample * 1)()) == {INVALID_ARGUMENT}
    """)


def test_irq_is_the_line_sysfs_shows(lib_dir, state_file) -> None:
    """nvmlDeviceGetIrqNum agrees with the GPU's sysfs ``irq`` (the pci surface writes ``legacy_irq``)."""
    run(lib_dir, state_file("h100"), f"""
        from mokka_core.model.identity import legacy_irq
        kv = dict(rendered("h100"))
        for i, d in enumerate(handles):
            irq = U(); assert L.nvmlDeviceGetIrqNum(d, ctypes.byref(irq)) == 0
            assert irq.value == legacy_irq(kv[f"device.{{i}}.pci.bus_id"]) >= 16
        assert L.nvmlDeviceGetIrqNum(handles[0], None) == {INVALID_ARGUMENT}
    """)


@pytest.mark.parametrize("board", ["a100", "h100", "b200", "gb200", "gb300", "l40s", "t4"])
def test_no_confidential_computing_memory(lib_dir, state_file, board: str) -> None:
    """Every capture shows ``cc_protected_memory_usage/total`` 0 MiB: confidential computing is off."""
    run(lib_dir, state_file(board), f"""
        class Memory(ctypes.Structure):
            _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]
        for d in handles:
            m = Memory(1, 1, 1)
            assert L.nvmlDeviceGetConfComputeProtectedMemoryUsage(d, ctypes.byref(m)) == 0
            assert (m.total, m.free, m.used) == (0, 0, 0)
        assert L.nvmlDeviceGetConfComputeProtectedMemoryUsage(handles[0], None) == {INVALID_ARGUMENT}
    """)
