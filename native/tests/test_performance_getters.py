"""The performance, power-source and conf-compute getters go-nvml and nvidia-ml-py 13.x call on every board, through
ctypes with nvml.h 13.5.37's layouts.

Expected values: the clocks of ``reference/captures/qx-<board>.xml`` (``clocks``, ``max_clocks``: one P-state, P0,
on every capture) in nvml.h's token list for nvmlDeviceGetPerformanceModes (the transfer rate twice the memory
clock, as in its example), and the same tokens of the current level, without ``perf``, for
nvmlDeviceGetCurrentClockFreqs (nvidia-settings' GPUCurrentClockFreqsString on real boards); the utilization the
GPU's own getters report, per nvml.h's domains; AC power (nvml.h's NVML_POWER_SOURCE_*: no server board runs from a
battery); and, with confidential computing off as on every capture (``cc_protected_memory_usage`` total 0 MiB), no
protected memory and all of ``fb_memory_usage/total`` unprotected (open-gpu-kernel-modules ``conf_compute_api.c``,
GET_VIDMEM_SIZE; nvml.h: Ampere and newer).
"""
from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import nvml_env

CAPTURES = Path(__file__).resolve().parents[2] / "reference" / "captures"
PRELUDE = textwrap.dedent("""
    import ctypes
    L = ctypes.CDLL("libnvidia-ml.so.1")
    U = ctypes.c_uint

    class PerfModes(ctypes.Structure):  # nvmlDevicePerfModes_v1_t
        _fields_ = [("version", U), ("str", ctypes.c_char * 2048)]

    class Domain(ctypes.Structure):
        _fields_ = [("bIsPresent", U), ("percentage", U), ("incThreshold", U), ("decThreshold", U)]

    class DynamicPstates(ctypes.Structure):  # nvmlGpuDynamicPstatesInfo_t
        _fields_ = [("flags", U), ("utilization", Domain * 8)]

    class MemSize(ctypes.Structure):  # nvmlConfComputeMemSizeInfo_t
        _fields_ = [("protectedMemSizeKib", ctypes.c_ulonglong), ("unprotectedMemSizeKib", ctypes.c_ulonglong)]

    PERF_MODES_V1 = ctypes.sizeof(PerfModes) | 1 << 24
    assert L.nvmlInit_v2() == 0
    n = U(); L.nvmlDeviceGetCount_v2(ctypes.byref(n))
    handles = []
    for i in range(n.value):
        d = ctypes.c_void_p(); assert L.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(d)) == 0; handles.append(d)
""")
SUCCESS, INVALID_ARGUMENT, NOT_SUPPORTED, ARGUMENT_VERSION_MISMATCH = 0, 2, 3, 25
BOARDS = ("a100", "b200", "gb200", "gb300", "h100", "l40s", "t4")
AMPERE_OR_NEWER = {board: board != "t4" for board in BOARDS}
#: boards whose profile idles at the capture's clocks: the L40S and T4 captures ran at full clocks (2040/9001,
#: 1590/5000 MHz) while their profiles idle in P8 (210/405, 300/405 MHz), so those two are checked against the
#: clock getters only
AT_CAPTURED_CLOCKS = tuple(board for board in BOARDS if board not in ("l40s", "t4"))


def run(lib_dir: Path, state: Path, body: str) -> str:
    p = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body)], env=nvml_env(lib_dir, state),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, f"stdout:{p.stdout}\nstderr:{p.stderr}"
    return p.stdout


def captured_mhz(board: str, block: str, clock: str) -> int:
    """``<block><clock>N MHz</clock>`` of the first GPU of the board's capture."""
    xml = (CAPTURES / f"qx-{board}.xml").read_text()
    return int(re.search(rf"<{block}>.*?<{clock}>(\d+) MHz</{clock}>", xml, re.S).group(1))


def captured_fb_total_mib(board: str) -> int:
    xml = (CAPTURES / f"qx-{board}.xml").read_text()
    return int(re.search(r"<fb_memory_usage>\s*<total>(\d+) MiB</total>", xml).group(1))


@pytest.mark.parametrize("board", AT_CAPTURED_CLOCKS)
def test_performance_modes_are_the_p0_clocks_of_the_capture(lib_dir, state_file, board: str) -> None:
    graphics = captured_mhz(board, "clocks", "graphics_clock")
    graphics_max = captured_mhz(board, "max_clocks", "graphics_clock")
    memory = captured_mhz(board, "clocks", "mem_clock")
    memory_max = captured_mhz(board, "max_clocks", "mem_clock")
    expected = (f"perf=0, nvclock={graphics}, nvclockmin={graphics}, nvclockmax={graphics_max}, nvclockeditable=0, "
                f"memclock={memory}, memclockmin={memory}, memclockmax={memory_max}, memclockeditable=0, "
                f"memtransferrate={2 * memory}, memtransferratemin={2 * memory}, "
                f"memtransferratemax={2 * memory_max}, memtransferrateeditable=0 ;")
    out = run(lib_dir, state_file(board), f"""
        for d in handles:
            m = PerfModes(version=PERF_MODES_V1)
            assert L.nvmlDeviceGetPerformanceModes(d, ctypes.byref(m)) == 0
            print(m.str.decode())
        m = PerfModes(version=PERF_MODES_V1 + 1)
        assert L.nvmlDeviceGetPerformanceModes(handles[0], ctypes.byref(m)) == {ARGUMENT_VERSION_MISMATCH}
        assert m.str == b""
        assert L.nvmlDeviceGetPerformanceModes(handles[0], None) == {INVALID_ARGUMENT}
    """)
    assert out.splitlines() == [expected] * len(out.splitlines()) and out, out


@pytest.mark.parametrize("board", BOARDS)
def test_performance_modes_agree_with_the_p0_clock_range(lib_dir, state_file, board: str) -> None:
    """The string and nvmlDeviceGetMinMaxClockOfPState(P0) read one range."""
    run(lib_dir, state_file(board), """
        m = PerfModes(version=PERF_MODES_V1)
        assert L.nvmlDeviceGetPerformanceModes(handles[0], ctypes.byref(m)) == 0
        tokens = dict(t.split("=") for t in m.str.decode().rstrip(" ;").split(", "))
        for clock, name in ((0, "nvclock"), (2, "memclock")):
            lo, hi = U(), U()
            assert L.nvmlDeviceGetMinMaxClockOfPState(handles[0], clock, 0, ctypes.byref(lo), ctypes.byref(hi)) == 0
            assert (int(tokens[name + "min"]), int(tokens[name + "max"])) == (lo.value, hi.value)
        assert L.nvmlDeviceGetMinMaxClockOfPState(handles[0], 0, 2, ctypes.byref(lo), ctypes.byref(hi)) == 3
    """)


@pytest.mark.parametrize("board", BOARDS)
def test_current_clock_freqs_are_the_clock_getters_readings(lib_dir, state_file, board: str) -> None:
    """The current level's tokens (nvidia-settings' GPUCurrentClockFreqsString on a real board: nvclock ..
    memtransferrateeditable, no perf token): the clocks GetClockInfo and GetMaxClockInfo report, per GPU."""
    run(lib_dir, state_file(board), f"""
        def clock(fn, d, kind):
            v = U(); assert getattr(L, fn)(d, kind, ctypes.byref(v)) == 0
            return v.value
        for d in handles:
            s = PerfModes(version=PERF_MODES_V1)  # nvmlDeviceCurrentClockFreqs_v1_t: the same layout
            assert L.nvmlDeviceGetCurrentClockFreqs(d, ctypes.byref(s)) == 0
            g, gmax = clock("nvmlDeviceGetClockInfo", d, 0), clock("nvmlDeviceGetMaxClockInfo", d, 0)
            m, mmax = clock("nvmlDeviceGetClockInfo", d, 2), clock("nvmlDeviceGetMaxClockInfo", d, 2)
            expected = (f"nvclock={{g}}, nvclockmin={{g}}, nvclockmax={{gmax}}, nvclockeditable=0, "
                        f"memclock={{m}}, memclockmin={{m}}, memclockmax={{mmax}}, memclockeditable=0, "
                        f"memtransferrate={{2 * m}}, memtransferratemin={{2 * m}}, memtransferratemax={{2 * mmax}}, "
                        f"memtransferrateeditable=0 ;")
            assert s.str.decode() == expected, (s.str, expected)
        s = PerfModes(version=PERF_MODES_V1 + 1)
        assert L.nvmlDeviceGetCurrentClockFreqs(handles[0], ctypes.byref(s)) == {ARGUMENT_VERSION_MISMATCH}
        assert L.nvmlDeviceGetCurrentClockFreqs(handles[0], None) == {INVALID_ARGUMENT}
    """)


@pytest.mark.parametrize("board", AT_CAPTURED_CLOCKS)
def test_current_clock_freqs_of_the_capture(lib_dir, state_file, board: str) -> None:
    graphics = captured_mhz(board, "clocks", "graphics_clock")
    memory = captured_mhz(board, "clocks", "mem_clock")
    out = run(lib_dir, state_file(board), """
        s = PerfModes(version=PERF_MODES_V1)
        assert L.nvmlDeviceGetCurrentClockFreqs(handles[0], ctypes.byref(s)) == 0
        print(s.str.decode())
    """)
    assert out.startswith(f"nvclock={graphics}, ") and f", memclock={memory}, " in out, out


def test_dynamic_pstates_report_the_utilization_getters(lib_dir, state_file) -> None:
    """Graphics and frame-buffer domains are GetUtilizationRates' gpu and memory, video the busier of the encoder and
    decoder; the bus domain has no reading (not present), nor do the driver's thresholds (0)."""
    overrides = {"device.1.utilization.gpu": 73, "device.1.utilization.memory": 41,
                 "device.1.utilization.encoder": 12, "device.1.utilization.decoder": 30}
    out = run(lib_dir, state_file("h100", overrides=overrides), """
        for d in handles[:2]:
            p = DynamicPstates(flags=7)
            assert L.nvmlDeviceGetDynamicPstatesInfo(d, ctypes.byref(p)) == 0
            print(p.flags, *[(u.bIsPresent, u.percentage, u.incThreshold, u.decThreshold) for u in p.utilization])
        assert L.nvmlDeviceGetDynamicPstatesInfo(handles[0], None) == 2
    """)
    idle, busy = out.splitlines()
    absent = "(0, 0, 0, 0)"
    assert idle == "0 (1, 0, 0, 0) (1, 0, 0, 0) (1, 0, 0, 0) " + " ".join([absent] * 5)
    assert busy == "0 (1, 73, 0, 0) (1, 41, 0, 0) (1, 30, 0, 0) " + " ".join([absent] * 5)


def test_dynamic_pstates_follow_the_time_varying_utilization(lib_dir, state_file) -> None:
    overrides = {"device.0.dynamic.utilization": 1, "device.0.dynamic.utilization.gpu_min": 20,
                 "device.0.dynamic.utilization.gpu_max": 90}
    run(lib_dir, state_file("h100", overrides=overrides), """
        class Utilization(ctypes.Structure):
            _fields_ = [("gpu", U), ("memory", U)]
        for attempt in range(20):  # the reading changes once per second: read both within one
            before, after, p = Utilization(), Utilization(), DynamicPstates()
            L.nvmlDeviceGetUtilizationRates(handles[0], ctypes.byref(before))
            assert L.nvmlDeviceGetDynamicPstatesInfo(handles[0], ctypes.byref(p)) == 0
            L.nvmlDeviceGetUtilizationRates(handles[0], ctypes.byref(after))
            if (before.gpu, before.memory) == (after.gpu, after.memory):
                break
        assert 20 <= p.utilization[0].percentage <= 90
        assert (p.utilization[0].percentage, p.utilization[1].percentage) == (before.gpu, before.memory)
    """)


@pytest.mark.parametrize("board", BOARDS)
def test_power_source_is_ac(lib_dir, state_file, board: str) -> None:
    run(lib_dir, state_file(board), f"""
        for d in handles:
            source = U(7)
            assert L.nvmlDeviceGetPowerSource(d, ctypes.byref(source)) == 0 and source.value == 0  # AC
        assert L.nvmlDeviceGetPowerSource(handles[0], None) == {INVALID_ARGUMENT}
    """)


@pytest.mark.parametrize("board", BOARDS)
def test_conf_compute_memory_sizes_with_cc_off(lib_dir, state_file, board: str) -> None:
    fb_kib = captured_fb_total_mib(board) * 1024
    expected = (SUCCESS, 0, fb_kib) if AMPERE_OR_NEWER[board] else (NOT_SUPPORTED, 5, 5)
    out = run(lib_dir, state_file(board), f"""
        for d in handles:
            m = MemSize(5, 5)
            r = L.nvmlDeviceGetConfComputeMemSizeInfo(d, ctypes.byref(m))
            print(r, m.protectedMemSizeKib, m.unprotectedMemSizeKib)
        assert L.nvmlDeviceGetConfComputeMemSizeInfo(handles[0], None) == {INVALID_ARGUMENT}
    """)
    assert out.splitlines() == [" ".join(map(str, expected))] * len(out.splitlines()) and out, out
