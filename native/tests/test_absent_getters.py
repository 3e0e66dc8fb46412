"""The vGPU calls (src/vgpu.c) and the getters of features the boards do not have (src/absent_features.c), through
ctypes with nvml.h 13.5.37's layouts, on the boards' state files.

Expected answers are the real boards' (``reference/captures/qx-<board>.xml``): ``host_vgpu_mode`` and
``vgpu_heterogeneous_mode`` N/A on every GPU (the bare-metal driver is no vGPU host: NOT_SUPPORTED), no vGPU
software licensed product (GetGridLicensableFeatures_v4: licensing not supported, no feature), ``fan_speed``
N/A (no fans), ``current_dram_encryption``/``pending_dram_encryption`` N/A; the rest NOT_SUPPORTED for the
reasons native/README.md gives. The argument checks come first, as nvml.h documents them: NULL is
INVALID_ARGUMENT, a wrong struct version ARGUMENT_VERSION_MISMATCH.
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
BOARDS = ("a100", "b200", "gb200", "gb300", "h100", "l40s", "t4")
SUCCESS, INVALID_ARGUMENT, NOT_SUPPORTED, NOT_FOUND, ARGUMENT_VERSION_MISMATCH = 0, 2, 3, 6, 25

PRELUDE = textwrap.dedent("""
    import ctypes
    L = ctypes.CDLL("libnvidia-ml.so.1")
    U, I, ULL = ctypes.c_uint, ctypes.c_int, ctypes.c_ulonglong
    def ref(x): return ctypes.byref(x)
    def version(struct, v): return ctypes.sizeof(struct) | v << 24  # NVML_STRUCT_VERSION

    class Versioned(ctypes.Structure):  # nvmlVgpuHeterogeneousMode_v1_t, nvmlDramEncryptionInfo_v1_t
        _fields_ = [("version", U), ("value", U)]
    class FanSpeed(ctypes.Structure):  # nvmlFanSpeedInfo_v1_t
        _fields_ = [("version", U), ("fan", U), ("speed", U)]
    class Cooler(ctypes.Structure):  # nvmlCoolerInfo_v1_t
        _fields_ = [("version", U), ("index", U), ("signalType", U), ("target", U)]
    class ClockOffset(ctypes.Structure):  # nvmlClockOffset_v1_t
        _fields_ = [("version", U), ("type", U), ("pstate", U), ("offset", I), ("min", I), ("max", I)]
    class UtilInfo(ctypes.Structure):  # nvmlVgpu{Instances,Processes}UtilizationInfo_v1_t (their version word)
        _fields_ = [("version", U), ("rest", ctypes.c_ubyte * 28)]
    class BwModes(ctypes.Structure):  # nvmlNvlinkSupportedBwModes_v1_t
        _fields_ = [("version", U), ("bwModes", ctypes.c_ubyte * 23), ("totalBwModes", ctypes.c_ubyte)]
    class BwMode(ctypes.Structure):  # nvmlNvlinkGetBwMode_v1_t
        _fields_ = [("version", U), ("bIsBest", U), ("bwMode", ctypes.c_ubyte)]
    class License(ctypes.Structure):  # nvmlGridLicensableFeatures_t: the flag, the count, 3 features of 284 bytes
        _fields_ = [("supported", I), ("count", U), ("features", ctypes.c_ubyte * (3 * 284))]
    # the UtilInfo versions: nvmlVgpuInstancesUtilizationInfo_v1_t is 32 bytes, nvmlVgpuProcessesUtilizationInfo_v1_t 24
    INSTANCES_V1, PROCESSES_V1 = 32 | 1 << 24, 24 | 1 << 24

    assert L.nvmlInit_v2() == 0
    n = U(); L.nvmlDeviceGetCount_v2(ref(n))
    handles = []
    for i in range(n.value):
        d = ctypes.c_void_p(); assert L.nvmlDeviceGetHandleByIndex_v2(i, ref(d)) == 0; handles.append(d)

    def versioned(struct, v, **fields):
        s = struct(**fields); s.version = version(struct, v); return s
""")


def run(lib_dir: Path, state: Path, body: str) -> None:
    p = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body)], env=nvml_env(lib_dir, state),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, f"stdout:{p.stdout}\nstderr:{p.stderr}"


def captured(board: str, element: str) -> list[str]:
    return re.findall(rf"<{element}>(.*?)</{element}>", (CAPTURES / f"qx-{board}.xml").read_text())


@pytest.mark.parametrize("board", BOARDS)
def test_the_bare_metal_driver_is_no_vgpu_host(lib_dir, state_file, board: str) -> None:
    assert set(captured(board, "host_vgpu_mode")) == set(captured(board, "vgpu_heterogeneous_mode")) == {"N/A"}
    assert not captured(board, "vgpu_software_licensed_product")
    run(lib_dir, state_file(board), f"""
        for d in handles:
            for suffix in ("", "_v2", "_v3", "_v4"):
                lic = License(supported=7, count=9)
                assert getattr(L, "nvmlDeviceGetGridLicensableFeatures" + suffix)(d, ref(lic)) == {SUCCESS}
                assert (lic.supported, lic.count) == (0, 0), suffix
            assert L.nvmlDeviceGetVgpuHeterogeneousMode(d, ref(versioned(Versioned, 1))) == {NOT_SUPPORTED}
            for fn in ("SupportedVgpus", "CreatableVgpus", "ActiveVgpus"):
                assert getattr(L, "nvmlDeviceGet" + fn)(d, ref(U(0)), None) == {NOT_SUPPORTED}, fn
            for fn in ("VgpuMetadata", "PgpuMetadataString"):  # (device, buffer, size): the size query
                assert getattr(L, "nvmlDeviceGet" + fn)(d, None, ref(U(0))) == {NOT_SUPPORTED}, fn
            buf = ctypes.create_string_buffer(64)
            for fn in ("VgpuSchedulerCapabilities", "VgpuSchedulerLog", "VgpuSchedulerState"):
                assert getattr(L, "nvmlDeviceGet" + fn)(d, buf) == {NOT_SUPPORTED}, fn
            for fn, v1 in (("Instances", INSTANCES_V1), ("Processes", PROCESSES_V1)):
                f = getattr(L, f"nvmlDeviceGetVgpu{{fn}}UtilizationInfo")
                assert f(d, ref(UtilInfo(version=v1))) == {NOT_SUPPORTED}, fn
            assert L.nvmlDeviceGetVgpuUtilization(d, ULL(0), ref(U()), ref(U(0)), None) == {NOT_SUPPORTED}
            assert L.nvmlDeviceGetVgpuProcessUtilization(d, ULL(0), ref(U(0)), None) == {NOT_SUPPORTED}
    """)


def test_vgpu_argument_checks(lib_dir, state_file) -> None:
    run(lib_dir, state_file("h100"), f"""
        d = handles[0]
        assert L.nvmlDeviceGetGridLicensableFeatures_v4(d, None) == {INVALID_ARGUMENT}
        assert L.nvmlDeviceGetGridLicensableFeatures_v4(None, ref(License())) == {INVALID_ARGUMENT}
        assert L.nvmlDeviceGetVgpuHeterogeneousMode(d, None) == {INVALID_ARGUMENT}
        assert L.nvmlDeviceGetVgpuHeterogeneousMode(d, ref(versioned(Versioned, 2))) == {ARGUMENT_VERSION_MISMATCH}
        for fn in ("SupportedVgpus", "CreatableVgpus", "ActiveVgpus"):
            assert getattr(L, "nvmlDeviceGet" + fn)(d, None, None) == {INVALID_ARGUMENT}, fn
        for fn in ("VgpuMetadata", "PgpuMetadataString"):
            assert getattr(L, "nvmlDeviceGet" + fn)(d, ctypes.create_string_buffer(16), None) == {INVALID_ARGUMENT}, fn
        for fn in ("VgpuMetadata", "PgpuMetadataString"):  # nvml.h: a NULL buffer with a size other than 0
            assert getattr(L, "nvmlDeviceGet" + fn)(d, None, ref(U(16))) == {INVALID_ARGUMENT}, fn
        for fn in ("VgpuSchedulerCapabilities", "VgpuSchedulerLog", "VgpuSchedulerState"):
            assert getattr(L, "nvmlDeviceGet" + fn)(d, None) == {INVALID_ARGUMENT}, fn
        buf = ctypes.create_string_buffer(64)
        assert L.nvmlDeviceGetVgpuUtilization(d, ULL(0), None, ref(U(0)), None) == {INVALID_ARGUMENT}
        assert L.nvmlDeviceGetVgpuUtilization(d, ULL(0), ref(U()), None, None) == {INVALID_ARGUMENT}
        assert L.nvmlDeviceGetVgpuUtilization(d, ULL(0), ref(U()), ref(U(0)), buf) == {INVALID_ARGUMENT}
        assert L.nvmlDeviceGetVgpuProcessUtilization(d, ULL(0), None, None) == {INVALID_ARGUMENT}
        assert L.nvmlDeviceGetVgpuProcessUtilization(d, ULL(0), ref(U(0)), buf) == {INVALID_ARGUMENT}
        for fn, good in (("Instances", INSTANCES_V1), ("Processes", PROCESSES_V1)):
            f = getattr(L, f"nvmlDeviceGetVgpu{{fn}}UtilizationInfo")
            assert f(d, None) == {INVALID_ARGUMENT}
            assert f(d, ref(UtilInfo(version=good + (1 << 24)))) == {ARGUMENT_VERSION_MISMATCH}
    """)


@pytest.mark.parametrize("key, value", [("host_vgpu_mode", 0), ("virtualization_mode", 3)])
def test_a_vgpu_host_without_vgpus_lists_none(lib_dir, state_file, key: str, value: int) -> None:
    """A board the state makes a vGPU host (host vGPU mode non-SR-IOV, or virtualization mode Host VGPU) has no
    vGPU type or instance."""
    run(lib_dir, state_file("t4", overrides={f"device.{i}.{key}": value for i in range(4)}), f"""
        d = handles[0]
        for fn in ("SupportedVgpus", "CreatableVgpus", "ActiveVgpus"):
            count = U(5)
            assert getattr(L, "nvmlDeviceGet" + fn)(d, ref(count), None) == {SUCCESS}, fn
            assert count.value == 0, fn
        assert L.nvmlDeviceGetVgpuInstancesUtilizationInfo(d, ref(UtilInfo(version=INSTANCES_V1))) == {NOT_FOUND}
        assert L.nvmlDeviceGetVgpuProcessesUtilizationInfo(d, ref(UtilInfo(version=PROCESSES_V1))) == {NOT_FOUND}
        assert L.nvmlDeviceGetVgpuUtilization(d, ULL(0), ref(U()), ref(U(0)), None) == {NOT_FOUND}
        assert L.nvmlDeviceGetVgpuProcessUtilization(d, ULL(0), ref(U(0)), None) == {NOT_FOUND}
    """)


@pytest.mark.parametrize("board", BOARDS)
def test_no_fans_no_dram_encryption(lib_dir, state_file, board: str) -> None:
    assert set(captured(board, "fan_speed")) == {"N/A"}
    assert set(captured(board, "current_dram_encryption")) == set(captured(board, "pending_dram_encryption")) == {"N/A"}
    run(lib_dir, state_file(board), f"""
        for d in handles:
            assert L.nvmlDeviceGetFanSpeedRPM(d, ref(versioned(FanSpeed, 1))) == {NOT_SUPPORTED}
            assert L.nvmlDeviceGetCoolerInfo(d, ref(versioned(Cooler, 1))) == {NOT_SUPPORTED}
            assert L.nvmlDeviceGetMinMaxFanSpeed(d, ref(U()), ref(U())) == {NOT_SUPPORTED}
            cur, pend = versioned(Versioned, 1), versioned(Versioned, 1)
            assert L.nvmlDeviceGetDramEncryptionMode(d, ref(cur), ref(pend)) == {NOT_SUPPORTED}
    """)


def test_fan_and_dram_argument_checks(lib_dir, state_file) -> None:
    """The a10g profile has one fan (nvidia-smi on g5 instances: fan 0 %): index 1 is no fan of it."""
    run(lib_dir, state_file("a10g"), f"""
        d = handles[0]
        assert L.nvmlDeviceGetFanSpeedRPM(d, ref(versioned(FanSpeed, 1, fan=1))) == {INVALID_ARGUMENT}
        assert L.nvmlDeviceGetCoolerInfo(d, ref(versioned(Cooler, 1, index=1))) == {INVALID_ARGUMENT}
        assert L.nvmlDeviceGetFanSpeedRPM(d, ref(versioned(FanSpeed, 1, fan=0))) == {NOT_SUPPORTED}
        assert L.nvmlDeviceGetFanSpeedRPM(d, ref(versioned(FanSpeed, 2))) == {ARGUMENT_VERSION_MISMATCH}
        assert L.nvmlDeviceGetCoolerInfo(d, ref(versioned(Cooler, 2))) == {ARGUMENT_VERSION_MISMATCH}
        assert L.nvmlDeviceGetFanSpeedRPM(d, None) == L.nvmlDeviceGetCoolerInfo(d, None) == {INVALID_ARGUMENT}
        assert L.nvmlDeviceGetMinMaxFanSpeed(d, None, ref(U())) == {INVALID_ARGUMENT}
        good, bad = versioned(Versioned, 1), versioned(Versioned, 2)
        assert L.nvmlDeviceGetDramEncryptionMode(d, ref(good), None) == {INVALID_ARGUMENT}
        assert L.nvmlDeviceGetDramEncryptionMode(d, ref(good), ref(bad)) == {ARGUMENT_VERSION_MISMATCH}
    """)


@pytest.mark.parametrize("board", BOARDS)
def test_offsets_powermizer_and_the_rest_are_not_supported(lib_dir, state_file, board: str) -> None:
    assert not re.search(r"offset|mizer|adaptive", (CAPTURES / f"qx-{board}.xml").read_text(), re.I)
    run(lib_dir, state_file(board), f"""
        for d in handles:
            for fn in ("GpcClkVfOffset", "MemClkVfOffset", "PowerMizerMode_v1", "AdaptiveClockInfoStatus",
                       "ConfComputeGpuCertificate", "AdaptiveTgpModeInfo_v1", "BankRemapperStatus_v1"):
                buf = ctypes.create_string_buffer(0x8000)
                assert getattr(L, "nvmlDeviceGet" + fn)(d, buf) == {NOT_SUPPORTED}, fn
            for fn in ("GpcClkMinMaxVfOffset", "MemClkMinMaxVfOffset"):
                assert getattr(L, "nvmlDeviceGet" + fn)(d, ref(I()), ref(I())) == {NOT_SUPPORTED}, fn
            assert L.nvmlDeviceGetClockOffsets(d, ref(versioned(ClockOffset, 1, type=0, pstate=0))) == {NOT_SUPPORTED}
            assert L.nvmlDeviceGetNvlinkSupportedBwModes(d, ref(versioned(BwModes, 1))) == {NOT_SUPPORTED}
            assert L.nvmlDeviceGetNvlinkBwMode(d, ref(versioned(BwMode, 1))) == {NOT_SUPPORTED}
    """)


def test_offsets_and_the_rest_argument_checks(lib_dir, state_file) -> None:
    run(lib_dir, state_file("gb200"), f"""
        d = handles[0]
        for fn in ("GpcClkVfOffset", "MemClkVfOffset", "PowerMizerMode_v1", "AdaptiveClockInfoStatus",
                   "ConfComputeGpuCertificate", "AdaptiveTgpModeInfo_v1", "BankRemapperStatus_v1",
                   "ClockOffsets", "NvlinkSupportedBwModes", "NvlinkBwMode"):
            assert getattr(L, "nvmlDeviceGet" + fn)(d, None) == {INVALID_ARGUMENT}, fn
            assert getattr(L, "nvmlDeviceGet" + fn)(None, ctypes.create_string_buffer(0x8000)) == {INVALID_ARGUMENT}, fn
        for fn in ("GpcClkMinMaxVfOffset", "MemClkMinMaxVfOffset"):
            assert getattr(L, "nvmlDeviceGet" + fn)(d, ref(I()), None) == {INVALID_ARGUMENT}, fn
        assert L.nvmlDeviceGetClockOffsets(d, ref(versioned(ClockOffset, 2))) == {ARGUMENT_VERSION_MISMATCH}
        assert L.nvmlDeviceGetClockOffsets(d, ref(versioned(ClockOffset, 1, type=99))) == {INVALID_ARGUMENT}
        assert L.nvmlDeviceGetClockOffsets(d, ref(versioned(ClockOffset, 1, pstate=32))) == {INVALID_ARGUMENT}
        assert L.nvmlDeviceGetNvlinkSupportedBwModes(d, ref(versioned(BwModes, 2))) == {ARGUMENT_VERSION_MISMATCH}
        assert L.nvmlDeviceGetNvlinkBwMode(d, ref(versioned(BwMode, 2))) == {ARGUMENT_VERSION_MISMATCH}
    """)


def test_before_init_every_call_is_uninitialized(lib_dir, state_file) -> None:
    run(lib_dir, state_file("h100"), """
        d = handles[0]
        assert L.nvmlShutdown() == 0
        for fn in ("GridLicensableFeatures_v4", "VgpuHeterogeneousMode", "VgpuSchedulerState", "CoolerInfo",
                   "ClockOffsets", "PowerMizerMode_v1", "BankRemapperStatus_v1", "NvlinkBwMode"):
            assert getattr(L, "nvmlDeviceGet" + fn)(d, ctypes.create_string_buffer(0x8000)) == 1, fn
    """)
