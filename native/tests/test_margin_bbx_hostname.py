"""The T.Limit margin, the infoROM black-box (BBX) getters and the GPU hostname, through ctypes with nvml.h 13.5.37's
layouts and through real nvidia-smi 555.

Expected values are the real boards' (``reference/captures/qx-<board>.xml``, drivers 570–595): ``gpu_temp_tlimit`` is
the margin (nvml.h: "distance to nearest slowdown threshold"), ``gpu_temp`` plus it the same on every GPU of a board
(87 or 88 C), N/A on the A100 and T4; ``inforom_bbx_flush`` a timestamp and the duration of the last flush where the
board had flushed (H100, GB200, GB300), N/A (not flushed yet) elsewhere. nvml.h: the BBX getters on every board with
an infoROM, the hostname on Blackwell and newer, set by root, not kept across a GPU reset.
"""
from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import nvml_env
from mkstate import consumers

CAPTURES = Path(__file__).resolve().parents[2] / "reference" / "captures"
PRELUDE = textwrap.dedent("""
    import ctypes
    L = ctypes.CDLL("libnvidia-ml.so.1")
    U = ctypes.c_uint

    class Margin(ctypes.Structure):  # nvmlMarginTemperature_v1_t
        _fields_ = [("version", U), ("marginTemperature", ctypes.c_int)]

    class TimeData(ctypes.Structure):  # nvmlBBXTimeData_v1_t
        _fields_ = [("timeRun", U)]

    class Hostname(ctypes.Structure):  # nvmlHostname_v1_t
        _fields_ = [("value", ctypes.c_char * 64)]

    MARGIN_V1 = ctypes.sizeof(Margin) | 1 << 24
    assert L.nvmlInit_v2() == 0
    n = U(); L.nvmlDeviceGetCount_v2(ctypes.byref(n))
    handles = []
    for i in range(n.value):
        d = ctypes.c_void_p(); assert L.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(d)) == 0; handles.append(d)

    def margin(d, version=MARGIN_V1):
        m = Margin(version=version)
        return L.nvmlDeviceGetMarginTemperature(d, ctypes.byref(m)), m.marginTemperature

    def temperature(d):
        t = U(); assert L.nvmlDeviceGetTemperature(d, 0, ctypes.byref(t)) == 0
        return t.value

    def flush(d):
        ts, us = ctypes.c_ulonglong(), ctypes.c_ulong()
        return L.nvmlDeviceGetLastBBXFlushTime(d, ctypes.byref(ts), ctypes.byref(us)), ts.value, us.value

    def hostname(d):
        h = Hostname()
        return L.nvmlDeviceGetHostname_v1(d, ctypes.byref(h)), h.value.decode()

    def set_hostname(d, name):
        return L.nvmlDeviceSetHostname_v1(d, ctypes.byref(Hostname(value=name)))
""")
SUCCESS, INVALID_ARGUMENT, NOT_SUPPORTED, NO_PERMISSION, ARGUMENT_VERSION_MISMATCH, NOT_READY = 0, 2, 3, 4, 25, 27
TLIMIT_BOARDS = ("h100", "b200", "gb200", "gb300", "l40s")
FLUSHED_BOARDS = ("h100", "gb200", "gb300")
BLACKWELL = ("b200", "gb200", "gb300")
#: 2026/08/20 14:59:03.740 UTC, the last flush of GPU 0 of qx-h100.xml, as ms since 1970
BOOTED_MS = 1787237943740


def run(lib_dir: Path, state: Path, body: str) -> str:
    p = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body)], env=nvml_env(lib_dir, state, TZ="UTC"),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, f"stdout:{p.stdout}\nstderr:{p.stderr}"
    return p.stdout


def captured(board: str, element: str) -> list[str]:
    """``<element>`` of every GPU of the board's capture."""
    return re.findall(rf"<{element}>(.*?)</{element}>", (CAPTURES / f"qx-{board}.xml").read_text())


def smi(*args: str, state: Path, lib_dir: Path) -> str:
    binary = consumers.require("nvidia-smi", version="555")
    done = subprocess.run([str(binary), *args], env=nvml_env(lib_dir, state, TZ="UTC"), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.parametrize("board", TLIMIT_BOARDS)
def test_margin_counts_down_to_the_captured_limit(lib_dir, state_file, board: str) -> None:
    """Temperature plus margin is the capture's gpu_temp plus gpu_temp_tlimit (GPU 0; the same on every GPU)."""
    limit = int(captured(board, "gpu_temp")[0].removesuffix(" C")) + \
        int(captured(board, "gpu_temp_tlimit")[0].removesuffix(" C"))
    out = run(lib_dir, state_file(board), f"""
        for d in handles:
            r, m = margin(d); assert r == 0, r
            print(m + temperature(d))
        assert margin(handles[0], MARGIN_V1 + 1)[0] == {ARGUMENT_VERSION_MISMATCH}
        assert margin(handles[0], 2 << 24 | 8)[0] == {ARGUMENT_VERSION_MISMATCH}
        assert L.nvmlDeviceGetMarginTemperature(handles[0], None) == {INVALID_ARGUMENT}
    """)
    assert out.split() == [str(limit)] * len(out.split()) and out, out


@pytest.mark.parametrize("board", ("a100", "t4"))
def test_no_margin_before_the_tlimit_boards(lib_dir, state_file, board: str) -> None:
    assert captured(board, "gpu_temp_tlimit") == ["N/A"]
    run(lib_dir, state_file(board), f"""
        assert margin(handles[0]) == ({NOT_SUPPORTED}, 0)
    """)


def test_margin_follows_the_temperature_and_nvidia_smi_prints_it(lib_dir, state_file) -> None:
    state = state_file("b200", overrides={"device.0.temperature.gpu": 39})  # GPU 0 of qx-b200.xml: 39 C, 49 C
    run(lib_dir, state, """
        assert margin(handles[0]) == (0, 49)
    """)
    out = smi("-q", "-d", "TEMPERATURE", "-i", "0", state=state, lib_dir=lib_dir)
    assert re.search(r"GPU T.Limit Temp\s+: 49 C", out), out
    xml = smi("-q", "-x", "-i", "0", state=state, lib_dir=lib_dir)
    assert "<gpu_temp_tlimit>49 C</gpu_temp_tlimit>" in xml


@pytest.mark.parametrize("board", FLUSHED_BOARDS)
def test_last_bbx_flush_is_the_nodes_boot_with_the_captured_duration(lib_dir, state_file, board: str) -> None:
    duration = int(captured(board, "latest_duration")[0].removesuffix(" us"))
    state = state_file(board, overrides={"system.booted_ms": BOOTED_MS})
    run(lib_dir, state, f"""
        for d in handles:
            assert flush(d) == (0, {BOOTED_MS * 1000}, {duration}), flush(d)
        assert L.nvmlDeviceGetLastBBXFlushTime(handles[0], None, ctypes.byref(ctypes.c_ulong())) == {INVALID_ARGUMENT}
    """)
    if board == "h100":  # printed as the capture prints GPU 0's flush
        out = smi("-q", "-x", "-i", "0", state=state, lib_dir=lib_dir)
        assert "<latest_timestamp>2026/08/20 14:59:03.740</latest_timestamp>" in out, out
        assert f"<latest_duration>{duration} us</latest_duration>" in out


@pytest.mark.parametrize("board", ("a100", "b200", "l40s", "t4"))
def test_no_bbx_flush_yet_where_the_capture_shows_none(lib_dir, state_file, board: str) -> None:
    assert set(captured(board, "latest_timestamp")) == {"N/A"}
    state = state_file(board, overrides={"system.booted_ms": BOOTED_MS})
    run(lib_dir, state, f"""
        assert flush(handles[0]) == ({NOT_READY}, 0, 0)
    """)
    out = smi("-q", "-x", "-i", "0", state=state, lib_dir=lib_dir)
    assert "<latest_timestamp>N/A</latest_timestamp>" in out and "<latest_duration>N/A</latest_duration>" in out


def test_bbx_needs_the_node_boot_time(lib_dir, state_file) -> None:
    """Outside a node (no boot time) nothing has been flushed and no run time counted."""
    run(lib_dir, state_file("h100"), f"""
        assert flush(handles[0])[0] == {NOT_READY}
        assert L.nvmlDeviceGetBBXTimeData_v1(handles[0], ctypes.byref(TimeData())) == {NOT_SUPPORTED}
    """)


def test_bbx_run_time_counts_from_the_node_boot(lib_dir, state_file) -> None:
    booted = time.time_ns() // 1_000_000 - 3_600_000  # an hour ago
    out = run(lib_dir, state_file("t4", overrides={"system.booted_ms": booted}), f"""
        for d in handles:
            t = TimeData(); assert L.nvmlDeviceGetBBXTimeData_v1(d, ctypes.byref(t)) == 0
            print(t.timeRun)
        assert L.nvmlDeviceGetBBXTimeData_v1(handles[0], None) == {INVALID_ARGUMENT}
    """)
    assert all(3599 <= int(seconds) <= 3605 for seconds in out.split()) and out, out


@pytest.mark.parametrize("board", ("h100", "l40s", "a100"))
def test_no_hostname_before_blackwell(lib_dir, state_file, board: str) -> None:
    run(lib_dir, state_file(board), f"""
        assert hostname(handles[0]) == ({NOT_SUPPORTED}, "")
        assert set_hostname(handles[0], b"node-a") == {NOT_SUPPORTED}
    """)


def test_hostname_is_node_state_until_a_reset(lib_dir, state_file) -> None:
    state = state_file("b200")
    run(lib_dir, state, f"""
        assert hostname(handles[0]) == (0, "")
        assert set_hostname(handles[1], b"gpu-node-7.example") == 0
        for bad in (b"bad name", b"semi;colon", b"under_score"):
            assert set_hostname(handles[1], bad) == {INVALID_ARGUMENT}, bad
        assert L.nvmlDeviceSetHostname_v1(handles[1], None) == {INVALID_ARGUMENT}
        assert L.nvmlDeviceGetHostname_v1(handles[1], None) == {INVALID_ARGUMENT}
    """)
    # another process reads it back; only the GPU it was set on has it
    run(lib_dir, state, """
        assert hostname(handles[1]) == (0, "gpu-node-7.example")
        assert hostname(handles[0]) == (0, "")
    """)
    smi("-r", "-i", "1", state=state, lib_dir=lib_dir)
    run(lib_dir, state, """
        assert hostname(handles[1]) == (0, "")
    """)


def test_setting_the_hostname_is_root_only(lib_dir, state_file) -> None:
    import os

    if os.geteuid() != 0:
        pytest.skip("needs root, to drop to another user")
    state = state_file("gb200")
    run(lib_dir, state, f"""
        import os
        os.setresuid(65534, 65534, 65534)   # nobody, after loading the state as root
        assert set_hostname(handles[0], b"node-a") == {NO_PERMISSION}
        assert hostname(handles[0]) == (0, "")
    """)
