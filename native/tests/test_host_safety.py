"""The library never crashes its host process: each class of fault, under the ASan+UBSan build."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import NATIVE, nvml_env
from mkstate import make_state, write_state

PRELUDE = textwrap.dedent("""
    import ctypes, os, sys, time, threading
    sys.path.insert(0, %(tests)r)
    from mkstate import make_state, write_state
    L = ctypes.CDLL("libnvidia-ml.so.1")
    U = ctypes.c_uint
    def h(i):
        d = ctypes.c_void_p()
        r = L.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(d))
        return r, d
    class FV(ctypes.Structure):
        _fields_ = [("fieldId", U), ("scopeId", U), ("timestamp", ctypes.c_longlong),
                    ("latencyUsec", ctypes.c_longlong), ("valueType", U), ("nvmlReturn", U),
                    ("value", ctypes.c_ulonglong)]
""")


@pytest.fixture(scope="module")
def asan_dir() -> Path:
    if os.environ.get("MOKKA_NVML_LIB_DIR"):
        return Path(os.environ["MOKKA_NVML_LIB_DIR"])
    subprocess.run(["make", "-s", "-C", str(NATIVE), "asan", f"PYTHON={sys.executable}"], check=True)
    return NATIVE / "build" / "asan"


def run_asan(lib_dir: Path, state: Path, body: str, timeout: int = 120) -> subprocess.CompletedProcess:
    libasan = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True,
                             check=True).stdout.strip()
    env = nvml_env(lib_dir, state, LD_PRELOAD=libasan,
                   ASAN_OPTIONS="detect_leaks=0:exitcode=99:abort_on_error=0:verify_asan_link_order=0",
                   UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:exitcode=98")
    code = PRELUDE % {"tests": str(Path(__file__).parent)} + textwrap.dedent(body)
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout)
    out = p.stdout + p.stderr
    assert p.returncode == 0 and "AddressSanitizer" not in out and "runtime error" not in out, out[-6000:]
    return p


def test_snapshots_freed_by_time_a_long_call_keeps_its_snapshot(asan_dir, tmp_path):
    """A call that runs past the old 1 s grace period (its thread held up 3 s by a signal handler: sleep(SIGQUIT))
    while another thread keeps the state file replaced and the library re-reading it."""
    st = tmp_path / "mokka-nvml.state"
    write_state(st, make_state("h100", 1))
    run_asan(asan_dir, st, """
        import signal
        libc = ctypes.CDLL(None)
        libc.signal(signal.SIGQUIT, libc.sleep)  # the handler sleeps SIGQUIT = 3 seconds in the interrupted call
        assert L.nvmlInit_v2() == 0
        r, d = h(0)
        n = 3000000
        vals = (FV * n)()
        for i in range(n):
            vals[i].fieldId = 82 + i % 60
        texts = [make_state("h100", 1, {"device.0.temperature.gpu": t}) for t in (40, 41)]
        done = threading.Event()
        def replace():
            k = 0
            while not done.is_set():
                write_state(os.environ["MOKKA_NVML_STATE"], texts[k % 2]); k += 1
                c = U(); L.nvmlDeviceGetCount_v2(ctypes.byref(c))
                time.sleep(0.003)
        rets = []
        call = threading.Thread(target=lambda: rets.append(L.nvmlDeviceGetFieldValues(d, n, vals)))
        t = threading.Thread(target=replace); t.start()
        call.start()
        time.sleep(0.02)
        signal.pthread_kill(call.ident, signal.SIGQUIT)
        call.join(); done.set(); t.join()
        assert rets == [0], rets
    """, timeout=300)


def test_setter_record_skips_state_checks_bad_record_is_left_out(asan_dir, tmp_path):
    """The setter record is checked as the state file is: an out-of-range value leaves the record out."""
    st = tmp_path / "mokka-nvml.state"
    write_state(st, make_state("h100", 1))
    (tmp_path / "mokka-nvml.settings").write_text(
        "mokka-nvml-settings 1\ndevice.0.power.limit_mw=500000\ndevice.0.nvlink.count=4000000000\nend\n")
    p = run_asan(asan_dir, st, """
        assert L.nvmlInit_v2() == 0
        r, d = h(0)
        vals = (FV * 64)()
        for i in range(64):
            vals[i].fieldId = 82 + i
        assert L.nvmlDeviceGetFieldValues(d, 64, vals) == 0
        c = U()
        assert L.nvmlDeviceGetPowerManagementLimit(d, ctypes.byref(c)) == 0
        print("limit", c.value)
    """)
    assert "limit 500000" not in p.stdout  # the record is left out whole, not applied up to its bad line
    assert "setter record" in p.stderr and "nvlink.count" in p.stderr, p.stderr


MIG_BODY = """
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    if L.nvmlInit_v2() != 0:  # a state file rejected: no driver, nothing to read
        sys.exit(0)
    r, d = h(0)
    P = ctypes.c_void_p
    gi = P()
    for pid in (19, 20, 15, 14, 9, 5, 0):
        L.nvmlDeviceCreateGpuInstance(d, pid, ctypes.byref(gi))
    info = (U * 16)()
    for prof in range(10):
        if L.nvmlDeviceGetGpuInstanceProfileInfo(d, prof, info) != 0:
            continue
        n = info[3]  # instanceCount: the size of the caller's array (nvml.h)
        arr = libc.malloc(8 * max(n, 1))  # ASan's heap: a write past n handles is reported
        c = U(0)
        L.nvmlDeviceGetGpuInstances(d, info[0], ctypes.c_void_p(arr), ctypes.byref(c))
        for g in range(min(c.value, n)):
            gih = P.from_address(arr + 8 * g)
            for cp in range(8):
                ci = (U * 16)()
                if L.nvmlGpuInstanceGetComputeInstanceProfileInfo(gih, cp, 0, ci) != 0:
                    continue
                m = ci[2]
                carr = libc.malloc(8 * max(m, 1))
                cc = U(0)
                L.nvmlGpuInstanceGetComputeInstances(gih, ci[0], ctypes.c_void_p(carr), ctypes.byref(cc))
    k = U()
    L.nvmlDeviceGetMaxMigDeviceCount(d, ctypes.byref(k))
    for i in range(8):
        md = P()
        if L.nvmlDeviceGetMigDeviceHandleByIndex(d, i, ctypes.byref(md)) == 0:
            buf = ctypes.create_string_buffer(96)
            L.nvmlDeviceGetName(md, buf, 96)
            L.nvmlDeviceGetUUID(md, buf, 96)
"""


@pytest.mark.parametrize("state,record", [
    # the profile table says two 1g instances fit; the partition has seven
    ({"device.0.mig_profile.0.instances": 2},
     "mig.gpu_instances=7,0,0,8,0,1,9,0,2,10,0,3,11,0,4,12,0,5,13,0,6"),
    ({}, "mig.gpu_instances=200,0,0"),                                   # GPU-instance id >= 15
    ({}, "mig.gpu_instances=7,0,0,7,0,1"),                               # an id twice
    ({}, "mig.gpu_instances=7,40,0"),                                    # no such profile row
    ({}, "mig.gpu_instances=7,0,200"),                                   # placement start out of range
    ({}, "mig.gpu_instances=7,0,0,99"),                                  # not whole triples
    ({}, "mig.gpu_instances=7,0,0\ndevice.0.mig.compute_instances=7,9,0,0"),    # compute-instance id >= 8
    ({}, "mig.gpu_instances=7,0,0\ndevice.0.mig.compute_instances=7,0,200,0"),  # no such compute profile
    ({}, "mig.gpu_instances=7,0,0\ndevice.0.mig.compute_instances=7,0,0,5"),    # start past the instance
    ({}, "mig.gpu_instances=7,0,0\ndevice.0.mig.compute_instances=9,0,0,0"),    # no such GPU instance
    ({}, "mig.gpu_instances=7,0,0\ndevice.0.mig.compute_instances=7,0,0,0,7,1,0,0"),  # two on one slice
    ({"device.0.mig_profile.0.placement_size": 40}, ""),                # a placement wider than the GPU
    ({"device.0.mig_profile.0.placements": "0,250"}, ""),               # a placement start past the GPU
], ids=["instances-fewer", "gi-id", "gi-dup", "gi-row", "gi-start", "gi-triples", "ci-id", "ci-profile",
        "ci-start", "ci-gi", "ci-overlap", "placement-size", "placement-start"])
def test_mig_records_larger_than_the_array_are_refused(asan_dir, tmp_path, state, record):
    st = tmp_path / "mokka-nvml.state"
    write_state(st, make_state("h100", 1, {"device.0.mig.current": 1, "device.0.mig.pending": 1, **state}))
    if record:
        (tmp_path / "mokka-nvml.settings").write_text(f"mokka-nvml-settings 1\ndevice.0.{record}\nend\n")
    p = run_asan(asan_dir, st, MIG_BODY)
    assert "rejected" in p.stderr or "ignored" in p.stderr, p.stderr


def test_torn_read_at_init_is_retried_not_driver_not_loaded(lib_dir, tmp_path):
    """Consumers start while the state file is written over in place (not renamed): every init succeeds."""
    import threading
    import time

    from test_library import run

    st = tmp_path / "mokka-nvml.state"
    text = make_state("h100", 2).encode()
    write_state(st, text.decode())
    stop = threading.Event()

    def rewrite():
        half = len(text) // 2
        while not stop.is_set():
            with open(st, "r+b") as f:
                f.truncate(0)
                f.write(text[:half])
                f.flush()
                time.sleep(0.004)
                f.write(text[half:])
            time.sleep(0.002)

    t = threading.Thread(target=rewrite)
    t.start()
    try:
        failed = []
        for _ in range(12):
            p = run(lib_dir, st, "print(L.nvmlInit_v2())")
            if p.stdout.strip() != "0":
                failed.append(p.stdout.strip() + p.stderr)
    finally:
        stop.set()
        t.join()
    assert not failed, failed


@pytest.mark.parametrize("where", ["state", "record"])
def test_unbounded_values_mig_max_devices_is_the_librarys_bound(lib_dir, tmp_path, where):
    """mig.max_devices above the MIG devices a GPU holds (MK_MAX_CI): nvidia-smi -q would loop over 2**32."""
    from test_library import run

    st = tmp_path / "mokka-nvml.state"
    big = {"device.0.mig.max_devices": 4294967295}
    write_state(st, make_state("h100", 1, big if where == "state" else {}))
    if where == "record":
        (tmp_path / "mokka-nvml.settings").write_text(
            "mokka-nvml-settings 1\ndevice.0.mig.max_devices=4294967295\nend\n")
    p = run(lib_dir, st, """
        r = L.nvmlInit_v2()
        c = U()
        if r == 0:
            print(L.nvmlDeviceGetMaxMigDeviceCount(h(0)[1], ctypes.byref(c)), c.value)
        else:
            print(r)
    """)
    assert p.stdout.split() == (["9"] if where == "state" else ["0", "7"]), p.stdout + p.stderr
    assert "mig.max_devices" in p.stderr
