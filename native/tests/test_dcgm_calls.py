"""The calls DCGM makes that were stubs (native/README.md, "DCGM's NVML contract"): CPU affinity, clearing ECC counts
and accounting records, API restrictions, the target temperature, the system event API, the unversioned
GetUnrepairableMemoryFlag. What a setter changes is node state: each scenario sets in one process and reads back in
the next."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from conftest import nvml_env
from mkstate import make_state, write_state

PRELUDE = textwrap.dedent("""
    import ctypes, os, sys, time
    L = ctypes.CDLL("libnvidia-ml.so.1")
    U, ULL = ctypes.c_uint, ctypes.c_ulonglong
    assert L.nvmlInit_v2() == 0
    def h(i):
        d = ctypes.c_void_p()
        assert L.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(d)) == 0
        return d
    def ecc_total(i, kind, counter):
        v = ULL(); r = L.nvmlDeviceGetTotalEccErrors(h(i), kind, counter, ctypes.byref(v))
        return v.value if r == 0 else r
    def as_nobody():
        os.setresuid(65534, 65534, 65534)
""")
SUCCESS, UNINITIALIZED, INVALID_ARGUMENT, NOT_SUPPORTED, NO_PERMISSION, TIMEOUT = 0, 1, 2, 3, 4, 10
VERSION_MISMATCH = 25


def nvml(lib_dir: Path, state: Path, body: str) -> str:
    p = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body)], env=nvml_env(lib_dir, state),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, f"stdout:{p.stdout}\nstderr:{p.stderr}"
    return p.stdout


@pytest.fixture(autouse=True)
def _root() -> None:
    if os.geteuid() != 0:
        pytest.skip("the setters are root only (as the real driver's); the tests set as root, then as nobody")


def test_set_and_clear_cpu_affinity(lib_dir, state_file):
    """SetCpuAffinity binds the calling thread to GetCpuAffinity's CPUs; ClearCpuAffinity to every CPU."""
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("needs two CPUs the tests may run on")
    one = allowed[-1]
    st = state_file("h100", overrides={"device.0.cpu_affinity": str(one)})
    out = nvml(lib_dir, st, f"""
        mask = (ctypes.c_ulong * 16)()
        assert L.nvmlDeviceGetCpuAffinity(h(0), 16, mask) == 0
        assert L.nvmlDeviceSetCpuAffinity(h(0)) == 0
        print(sorted(os.sched_getaffinity(0)) == [{one}], mask[{one} // 64] == 1 << {one % 64})
        assert L.nvmlDeviceClearCpuAffinity(h(0)) == 0
        print(sorted(os.sched_getaffinity(0)) == {allowed})
        assert L.nvmlDeviceSetCpuAffinity(ctypes.c_void_p(12345)) == {INVALID_ARGUMENT}
    """)
    assert out.split() == ["True", "True", "True"]
    st = state_file("h100", overrides={"device.0.cpu_affinity": None})
    nvml(lib_dir, st, f"assert L.nvmlDeviceSetCpuAffinity(h(0)) == {NOT_SUPPORTED}")


def test_clear_ecc_error_counts(lib_dir, state_file):
    """nvidia-smi -p 0 (volatile) / -p 1 (aggregate): every count of that kind to 0, root only, ECC on only."""
    counts = {f"device.{i}.ecc.{counter}.{kind}.dram": n for i in (0, 1)
              for counter, n in (("volatile", 3), ("aggregate", 5)) for kind in ("corrected", "uncorrected")}
    st = state_file("h100", overrides={**counts, "device.2.ecc.current": 0})
    nvml(lib_dir, st, f"""
        assert L.nvmlDeviceClearEccErrorCounts(h(0), 2) == {INVALID_ARGUMENT}
        assert L.nvmlDeviceClearEccErrorCounts(h(2), 0) == {NOT_SUPPORTED}          # ECC off
        assert L.nvmlDeviceClearEccErrorCounts(h(0), 0) == {SUCCESS}
        assert L.nvmlDeviceClearEccErrorCounts(h(1), 1) == {SUCCESS}
    """)
    out = nvml(lib_dir, st, f"""
        print([ecc_total(i, kind, counter) for i in (0, 1) for counter in (0, 1) for kind in (0, 1)])
        as_nobody()
        assert L.nvmlDeviceClearEccErrorCounts(h(1), 0) == {NO_PERMISSION}
    """)
    # GPU 0: volatile cleared, aggregate kept; GPU 1 the other way round
    assert out.split("\n")[0] == "[0, 0, 5, 5, 3, 3, 0, 0]"


def test_clear_accounting_pids(lib_dir, state_file):
    st = state_file("h100")
    nvml(lib_dir, st, f"""
        assert L.nvmlDeviceClearAccountingPids(h(0)) == {NOT_SUPPORTED}             # accounting mode off
        assert L.nvmlDeviceSetAccountingMode(h(0), 1) == 0
        assert L.nvmlDeviceClearAccountingPids(h(0)) == {SUCCESS}
        n = U(); assert L.nvmlDeviceGetAccountingPids(h(0), ctypes.byref(n), None) == 0 and n.value == 0
        as_nobody()
        assert L.nvmlDeviceClearAccountingPids(h(0)) == {NO_PERMISSION}
    """)


@pytest.fixture
def open_dir():
    """A directory every user may write (pytest's own are root-only): nobody's setter writes the record there."""
    with tempfile.TemporaryDirectory(prefix="mokka-dcgm-") as d:
        os.chmod(d, 0o777)
        yield Path(d)


def test_api_restriction_on_application_clocks(lib_dir, open_dir):
    """nvidia-smi -acp: application clocks are root only until root lifts it; auto boost has no restriction."""
    st = open_dir / "mokka-nvml.state"
    write_state(st, make_state("a100"))
    get = """
        def restricted(i, api=0):
            v = U(7); r = L.nvmlDeviceGetAPIRestriction(h(i), api, ctypes.byref(v))
            return v.value if r == 0 else ('error', r)
    """
    out = nvml(lib_dir, st, get + f"""
        print(restricted(0), restricted(0, 1))
        assert L.nvmlDeviceSetAPIRestriction(h(0), 2, 0) == {INVALID_ARGUMENT}
        assert L.nvmlDeviceSetAPIRestriction(h(0), 1, 0) == {NOT_SUPPORTED}
        assert L.nvmlDeviceSetAPIRestriction(h(0), 0, 0) == {SUCCESS}
    """)
    assert out.split("\n")[0] == f"1 ('error', {NOT_SUPPORTED})"
    out = nvml(lib_dir, st, get + f"""
        print(restricted(0))
        as_nobody()
        assert L.nvmlDeviceSetAPIRestriction(h(0), 0, 1) == {NO_PERMISSION}
        assert L.nvmlDeviceSetApplicationsClocks(h(0), 1215, 1095) == {SUCCESS}       # unrestricted GPU
        assert L.nvmlDeviceSetApplicationsClocks(h(0), 1215, 99999) == {INVALID_ARGUMENT}
        assert L.nvmlDeviceResetApplicationsClocks(h(0)) == {SUCCESS}
    """)
    assert out.split("\n")[0] == "0"
    write_state(st, make_state("h100"))
    os.unlink(st.with_suffix(".settings"))
    nvml(lib_dir, st, f"""
        as_nobody()
        assert L.nvmlDeviceSetApplicationsClocks(h(1), 2619, 1980) == {NO_PERMISSION}  # restricted by default
    """)


def test_set_temperature_threshold(lib_dir, state_file):
    """Only the acoustic target, on a board that reports one: every capture shows it N/A, so the built-in boards
    answer NOT_SUPPORTED; a board with a target and its range accepts a target inside it."""
    st = state_file("h100")
    nvml(lib_dir, st, f"""
        t = ctypes.c_int(85)
        for kind in range(8):                       # shutdown, slowdown, mem/gpu max, acoustic min/curr/max, gps
            assert L.nvmlDeviceSetTemperatureThreshold(h(0), kind, ctypes.byref(t)) == {NOT_SUPPORTED}, kind
        assert L.nvmlDeviceSetTemperatureThreshold(h(0), 8, ctypes.byref(t)) == {INVALID_ARGUMENT}
        assert L.nvmlDeviceGetTemperatureThreshold(h(0), 5, ctypes.byref(U())) == {NOT_SUPPORTED}
    """)
    st = state_file("h100", overrides={"device.0.temperature.target": 83, "device.0.temperature.target_min": 65,
                                       "device.0.temperature.target_max": 87})
    nvml(lib_dir, st, f"""
        assert L.nvmlDeviceSetTemperatureThreshold(h(0), 5, ctypes.byref(ctypes.c_int(88))) == {INVALID_ARGUMENT}
        assert L.nvmlDeviceSetTemperatureThreshold(h(0), 5, None) == {INVALID_ARGUMENT}
        assert L.nvmlDeviceSetTemperatureThreshold(h(0), 5, ctypes.byref(ctypes.c_int(70))) == {SUCCESS}
    """)
    out = nvml(lib_dir, st, f"""
        def threshold(kind):
            v = U(); assert L.nvmlDeviceGetTemperatureThreshold(h(0), kind, ctypes.byref(v)) == 0
            return v.value
        print(threshold(4), threshold(5), threshold(6))
        as_nobody()
        assert L.nvmlDeviceSetTemperatureThreshold(h(0), 5, ctypes.byref(ctypes.c_int(75))) == {NO_PERMISSION}
    """)
    assert out.split("\n")[0] == "65 70 87"


SYSTEM_EVENTS = """
    class Create(ctypes.Structure):
        _fields_ = [("version", U), ("set", ctypes.c_void_p)]
    class Register(ctypes.Structure):
        _fields_ = [("version", U), ("eventTypes", ULL), ("set", ctypes.c_void_p)]
    class Data(ctypes.Structure):
        _fields_ = [("eventType", ULL), ("gpuId", U)]
    class Wait(ctypes.Structure):
        _fields_ = [("version", U), ("timeoutms", U), ("set", ctypes.c_void_p), ("data", ctypes.POINTER(Data)),
                    ("dataSize", U), ("numEvent", U)]
    def tag(struct):
        return ctypes.sizeof(struct) | 1 << 24
"""


def test_system_events(lib_dir, state_file):
    """Versioned requests; bind/unbind register; a wait sleeps its timeout and answers TIMEOUT (no event source)."""
    st = state_file("h100")
    nvml(lib_dir, st, SYSTEM_EVENTS + f"""
        c = Create(version=tag(Create) + 1)
        assert L.nvmlSystemEventSetCreate(ctypes.byref(c)) == {VERSION_MISMATCH}
        assert L.nvmlSystemEventSetCreate(None) == {INVALID_ARGUMENT}
        c.version = tag(Create)
        assert L.nvmlSystemEventSetCreate(ctypes.byref(c)) == {SUCCESS} and c.set
        reg = Register(version=tag(Register), eventTypes=3, set=c.set)
        assert L.nvmlSystemRegisterEvents(ctypes.byref(reg)) == {SUCCESS}
        reg.eventTypes = 4
        assert L.nvmlSystemRegisterEvents(ctypes.byref(reg)) == {INVALID_ARGUMENT}
        data = (Data * 4)()
        w = Wait(version=tag(Wait), timeoutms=300, set=c.set, data=data, dataSize=4, numEvent=9)
        t0 = time.monotonic()
        assert L.nvmlSystemEventSetWait(ctypes.byref(w)) == {TIMEOUT}
        took = time.monotonic() - t0
        assert 0.29 < took < 2 and w.numEvent == 0, (took, w.numEvent)
        w.timeoutms = 0
        assert L.nvmlSystemEventSetWait(ctypes.byref(w)) == {TIMEOUT}
        w.version += 1
        assert L.nvmlSystemEventSetWait(ctypes.byref(w)) == {VERSION_MISMATCH}
        class Free(ctypes.Structure):
            _fields_ = [("version", U), ("set", ctypes.c_void_p)]
        assert L.nvmlSystemEventSetFree(ctypes.byref(Free(version=tag(Free), set=c.set))) == {SUCCESS}
        assert L.nvmlShutdown() == 0
        assert L.nvmlSystemEventSetCreate(ctypes.byref(Create(version=tag(Create)))) == {UNINITIALIZED}
    """)


def test_unrepairable_memory_flag_by_both_names(lib_dir, state_file):
    """DCGM calls the unversioned name (nvml.h declares only _v1): the same function."""
    for shape, expected in (("h100", [0, 0, 0, 0]), ("l40s", [NOT_SUPPORTED, NOT_SUPPORTED, 7, 7])):
        out = nvml(lib_dir, state_file(shape), """
            res = []
            for name in ("nvmlDeviceGetUnrepairableMemoryFlag", "nvmlDeviceGetUnrepairableMemoryFlag_v1"):
                flag = U(7)
                res.append(getattr(L, name)(h(0), ctypes.byref(flag)))
                res.append(flag.value)
            print(res[0], res[2], res[1], res[3])
        """)
        assert out.split() == [str(v) for v in expected], shape


def smi_run(smi: Path, lib_dir: Path, state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(smi), *args], env=nvml_env(lib_dir, state), capture_output=True, text=True, timeout=60)


@pytest.mark.consumer
def test_nvidia_smi_resets_ecc_errors(smi, lib_dir, state_file):
    """Real nvidia-smi -p 1 / -p 0 (--reset-ecc-errors): aggregate, then volatile counts to 0, read back."""
    st = state_file("h100", overrides={"device.0.ecc.volatile.corrected.dram": 4,
                                       "device.0.ecc.aggregate.corrected.dram": 6})
    query = ("--query-gpu=ecc.errors.corrected.volatile.total,ecc.errors.corrected.aggregate.total",
             "--format=csv,noheader", "-i", "0")
    assert smi_run(smi, lib_dir, st, *query).stdout.split() == ["4,", "6"]
    done = smi_run(smi, lib_dir, st, "-i", "0", "-p", "1")
    assert done.returncode == 0 and "Reset aggregate ECC errors to zero for GPU 00000000:1B:00.0." in done.stdout
    assert smi_run(smi, lib_dir, st, *query).stdout.split() == ["4,", "0"]
    done = smi_run(smi, lib_dir, st, "-i", "0", "-p", "0")
    assert done.returncode == 0 and "Reset volatile ECC errors to zero for GPU 00000000:1B:00.0." in done.stdout
    assert smi_run(smi, lib_dir, st, *query).stdout.split() == ["0,", "0"]


@pytest.mark.consumer
def test_nvidia_smi_gpu_target_temperature(smi, lib_dir, state_file):
    """Real nvidia-smi -gtt: not supported where the board's target is N/A (every capture); with a target and its
    range, a value inside is set and shown by -q, one outside is refused with the range."""
    st = state_file("h100")
    refused = smi_run(smi, lib_dir, st, "-i", "0", "-gtt", "80")
    assert "GPU Target Temperature Threshold not supported for GPU 00000000:1B:00.0." in refused.stdout
    st = state_file("h100", overrides={"device.0.temperature.target": 83, "device.0.temperature.target_min": 65,
                                       "device.0.temperature.target_max": 87})
    assert smi_run(smi, lib_dir, st, "-i", "0", "-gtt", "70").returncode == 0
    out = smi_run(smi, lib_dir, st, "-q", "-x", "-i", "0").stdout
    assert "<gpu_target_temperature>70 C</gpu_target_temperature>" in out
    assert "<gpu_target_temp_min>65 C</gpu_target_temp_min>" in out and "<gpu_target_temp_max>87 C" in out
    bad = smi_run(smi, lib_dir, st, "-i", "0", "-gtt", "99")
    assert bad.returncode != 0 and "GPU Target Temperature should be in range 65 - 87" in bad.stdout
