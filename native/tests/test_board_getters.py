"""The board getters the profiles feed from their captures: addressing mode, module power limits, the supported
graphics clock ladder (fractional steps rounded down, as Blackwell lists them) and C2C mode."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import nvml_env

PRELUDE = textwrap.dedent("""
    import ctypes
    L = ctypes.CDLL("libnvidia-ml.so.1")
    U = ctypes.c_uint
    assert L.nvmlInit_v2() == 0
    d = ctypes.c_void_p()
    assert L.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(d)) == 0
    class Versioned(ctypes.Structure):
        _fields_ = [("version", U), ("value", U)]
""")
ADDRESSING_MODE_V1 = 1 << 24 | 8  # NVML_STRUCT_VERSION(DeviceAddressingMode, 1)
NOT_SUPPORTED, INSUFFICIENT_SIZE, VERSION_MISMATCH = 3, 7, 25


def nvml(lib_dir: Path, state: Path, body: str) -> str:
    p = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body)], env=nvml_env(lib_dir, state),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, f"stdout:{p.stdout}\nstderr:{p.stderr}"
    return p.stdout


def test_addressing_mode_is_the_profiles_or_not_supported(lib_dir, state_file) -> None:
    body = f"""
        m = Versioned(version={ADDRESSING_MODE_V1})
        print(L.nvmlDeviceGetAddressingMode(d, ctypes.byref(m)), m.value)
        assert L.nvmlDeviceGetAddressingMode(d, ctypes.byref(Versioned(version=1))) == {VERSION_MISMATCH}
    """
    assert nvml(lib_dir, state_file("gb200"), body).split() == ["0", "2"]  # ATS on Grace
    assert nvml(lib_dir, state_file("h100", overrides={"device.0.addressing_mode": None}), body).split()[0] == \
        str(NOT_SUPPORTED)


def test_supported_graphics_clocks_follow_the_ladder(lib_dir, state_file) -> None:
    out = nvml(lib_dir, state_file("gb200"), """
        n = U(0)
        assert L.nvmlDeviceGetSupportedMemoryClocks(d, ctypes.byref(n), None) == 7 and n.value == 1
        mem = (U * 1)(); assert L.nvmlDeviceGetSupportedMemoryClocks(d, ctypes.byref(n), mem) == 0
        n = U(0)
        assert L.nvmlDeviceGetSupportedGraphicsClocks(d, mem[0], ctypes.byref(n), None) == 7
        clocks = (U * n.value)(); assert L.nvmlDeviceGetSupportedGraphicsClocks(d, mem[0], ctypes.byref(n), clocks) == 0
        assert L.nvmlDeviceGetSupportedGraphicsClocks(d, 1, ctypes.byref(n), clocks) == 6  # NOT_FOUND
        print(mem[0], len(clocks), *clocks[:4], *clocks[-2:])
    """)
    # reference/captures/qx-gb200.xml: 3996 MHz, 2062 2055 2047 2040 ... (7.5 MHz steps), its 256 highest
    assert out.split() == ["3996", "256", "2062", "2055", "2047", "2040", "157", "150"]


def test_module_power_limits_only_where_the_board_has_a_module(lib_dir, state_file) -> None:
    body = """
        class Field(ctypes.Structure):
            _fields_ = [("fieldId", U), ("scopeId", U), ("timestamp", ctypes.c_longlong),
                        ("latencyUsec", ctypes.c_longlong), ("valueType", U), ("nvmlReturn", U),
                        ("value", ctypes.c_ulonglong)]
        f = (Field * 2)(Field(fieldId=188, scopeId=0), Field(fieldId=188, scopeId=1))  # POWER_MAX_LIMIT: GPU, module
        assert L.nvmlDeviceGetFieldValues(d, 2, f) == 0
        print(f[0].nvmlReturn, f[0].value & 0xffffffff, f[1].nvmlReturn, f[1].value & 0xffffffff)
    """
    assert nvml(lib_dir, state_file("gb300"), body).split() == ["0", "1400000", "0", "2900000"]  # qx-gb300.xml
    assert nvml(lib_dir, state_file("h100"), body).split()[:3] == ["0", "700000", str(NOT_SUPPORTED)]


def test_temperature_v_is_the_temperature_getters_reading(lib_dir, state_file) -> None:
    out = nvml(lib_dir, state_file("h100", overrides={"device.0.temperature.gpu": 61}), f"""
        class Temperature(ctypes.Structure):
            _fields_ = [("version", U), ("sensorType", U), ("temperature", ctypes.c_int)]
        t = Temperature(version={1 << 24 | 12}, sensorType=0)  # NVML_STRUCT_VERSION(Temperature, 1)
        old = U(0); assert L.nvmlDeviceGetTemperature(d, 0, ctypes.byref(old)) == 0
        print(L.nvmlDeviceGetTemperatureV(d, ctypes.byref(t)), t.temperature, old.value)
        assert L.nvmlDeviceGetTemperatureV(d, ctypes.byref(Temperature(version=1, sensorType=0))) == {VERSION_MISMATCH}
        assert L.nvmlDeviceGetTemperatureV(d, ctypes.byref(Temperature(version={1 << 24 | 12}, sensorType=1))) == 2
        assert L.nvmlDeviceGetTemperatureV(d, None) == 2
    """)
    assert out.split() == ["0", "61", "61"]
