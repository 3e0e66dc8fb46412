"""NVML setters as node-wide state: the setter record beside the state file (native/README.md, "Settings").

Each scenario runs the library in its own processes: what one process sets, the next one reads back."""
from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import nvml_env
from visibility import SETTING_READER

PRELUDE = textwrap.dedent("""
    import ctypes, sys, time
    L = ctypes.CDLL("libnvidia-ml.so.1")
    U = ctypes.c_uint
    assert L.nvmlInit_v2() == 0
    def h(i):
        d = ctypes.c_void_p()
        assert L.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(d)) == 0
        return d
    def limit(i):
        v = U(); assert L.nvmlDeviceGetPowerManagementLimit(h(i), ctypes.byref(v)) == 0
        return v.value
    def ecc(i):
        cur, pend = U(), U(); assert L.nvmlDeviceGetEccMode(h(i), ctypes.byref(cur), ctypes.byref(pend)) == 0
        return cur.value, pend.value
    def volatile_dbe(i):
        v = ctypes.c_ulonglong(); assert L.nvmlDeviceGetTotalEccErrors(h(i), 1, 0, ctypes.byref(v)) == 0
        return v.value
""")

NO_PERMISSION, INVALID_ARGUMENT, NOT_SUPPORTED, IN_USE = 4, 2, 3, 19


def nvml(lib_dir: Path, state: Path, body: str) -> str:
    """Run `body` after the prelude in a fresh process; its stdout."""
    p = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body)], env=nvml_env(lib_dir, state),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, f"stdout:{p.stdout}\nstderr:{p.stderr}"
    return p.stdout


def record(state: Path) -> Path:
    return state.with_suffix(".settings")


def lock_file(state: Path) -> Path:
    return state.with_suffix(".settings.lock")


def parse_record(path: Path) -> dict[str, str]:
    lines = path.read_text().split("\n")
    assert lines[0] == "mokka-nvml-settings 1" and lines[-2:] == ["end", ""], lines
    return dict(line.split("=", 1) for line in lines[1:-2])


def test_a_setting_is_node_state(lib_dir, state_file):
    st = state_file("h100")
    nvml(lib_dir, st, """
        assert L.nvmlDeviceSetPowerManagementLimit(h(0), 500000) == 0
        assert limit(0) == 500000                                            # read back in the same process
        assert L.nvmlDeviceSetPowerManagementLimit(h(0), 9999000) == 2      # above max (700 W)
        assert L.nvmlDeviceSetPowerManagementLimit(h(0), 100000) == 2       # below min (200 W)
        assert L.nvmlDeviceSetPersistenceMode(h(1), 0) == 0
        assert L.nvmlDeviceSetComputeMode(h(1), 3) == 0
        assert L.nvmlDeviceSetComputeMode(h(1), 4) == 2
    """)
    out = nvml(lib_dir, st, """
        v, e = U(), U()
        assert L.nvmlDeviceGetPersistenceMode(h(1), ctypes.byref(v)) == 0
        assert L.nvmlDeviceGetComputeMode(h(1), ctypes.byref(e)) == 0
        assert L.nvmlDeviceGetEnforcedPowerLimit(h(0), ctypes.byref(U())) == 0
        print(limit(0), limit(1), v.value, e.value)
    """)
    assert out.split() == ["500000", "700000", "0", "3"]
    assert parse_record(record(st)) == {
        "device.0.power.limit_mw": "500000", "device.0.power.enforced_limit_mw": "500000",
        "device.1.persistence_mode": "0", "device.1.compute_mode": "3"}
    # the state file is rewritten (a ctl change): the settings still stand over it
    state_file("h100", overrides={"device.0.temperature.gpu": 50})
    assert nvml(lib_dir, st, "print(limit(0))").split() == ["500000"]


def test_ecc_pending_until_reset_and_reset_refused_with_processes(lib_dir, state_file):
    st = state_file("h100", overrides={"device.3.ecc.volatile.uncorrected.dram": 3,
                                       "device.3.ecc.aggregate.uncorrected.dram": 3,
                                       "device.2.process.0.pid": 4242})
    out = nvml(lib_dir, st, """
        uuid = bytes.fromhex("c4fe3e6cc98f6c4ea327ee696e12f7c4")
        t = ctypes.POINTER(ctypes.c_void_p)()
        assert L.nvmlInternalGetExportTable(ctypes.byref(t), uuid) == 0
        reset = ctypes.CFUNCTYPE(ctypes.c_int, U, ctypes.POINTER(ctypes.c_void_p))(t[168])
        primary = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(U))(t[20])
        p = U(7); assert primary(h(0), ctypes.byref(p)) == 0 and p.value == 0
        assert L.nvmlDeviceSetEccMode(h(0), 0) == 0
        print(ecc(0), volatile_dbe(3))
        assert reset(2, (ctypes.c_void_p * 2)(h(0), h(3))) == 0
        print(ecc(0), volatile_dbe(3))
        assert L.nvmlDeviceGetTotalEccErrors(h(0), 1, 0, ctypes.byref(ctypes.c_ulonglong())) == 3  # ECC off: N/A
        assert reset(1, (ctypes.c_void_p * 1)(h(2))) == 19                  # IN_USE: a process on GPU 2
        print(ecc(1))
    """)
    assert out.splitlines() == ["(1, 0) 3", "(0, 0) 0", "(1, 1)"]


def test_mig_mode(lib_dir, state_file):
    st = state_file("a100", overrides={"device.1.process.0.pid": 4242})
    out = nvml(lib_dir, st, """
        def mig(i):
            c, p = U(), U(); assert L.nvmlDeviceGetMigMode(h(i), ctypes.byref(c), ctypes.byref(p)) == 0
            return c.value, p.value
        status = ctypes.c_int(-1)
        assert L.nvmlDeviceSetMigMode(h(0), 1, ctypes.byref(status)) == 0 and status.value == 0
        assert L.nvmlDeviceSetMigMode(h(1), 1, ctypes.byref(status)) == 0 and status.value == 19  # in use: pending
        print(mig(0), mig(1))
    """)
    assert out.split("\n")[0] == "(1, 1) (0, 1)"
    record(st).unlink()  # another node in the same place
    t4 = state_file("t4")
    nvml(lib_dir, t4, "assert L.nvmlDeviceSetMigMode(h(0), 1, ctypes.byref(ctypes.c_int())) == 3")  # no MIG: N/A


def test_gpu_operation_mode_pending_until_reset_where_the_board_has_one(lib_dir, state_file):
    def gom_body(expect_gom: str) -> str:
        return textwrap.dedent("""
            uuid = bytes.fromhex("c4fe3e6cc98f6c4ea327ee696e12f7c4")
            t = ctypes.POINTER(ctypes.c_void_p)()
            assert L.nvmlInternalGetExportTable(ctypes.byref(t), uuid) == 0
            reset = ctypes.CFUNCTYPE(ctypes.c_int, U, ctypes.POINTER(ctypes.c_void_p))(t[168])
            def gom(i):
                c, p = U(), U(); r = L.nvmlDeviceGetGpuOperationMode(h(i), ctypes.byref(c), ctypes.byref(p))
                return r, c.value, p.value
        """) + textwrap.dedent(expect_gom)
    # every capture's board reports N/A: NOT_SUPPORTED for the getter and the setter
    nvml(lib_dir, state_file("h100"), gom_body("""
        assert gom(0)[0] == 3 and L.nvmlDeviceSetGpuOperationMode(h(0), 1) == 3
    """))
    record(state_file("h100")).unlink(missing_ok=True)
    st = state_file("h100", overrides={"device.0.gpu_operation_mode.current": 0,
                                       "device.0.gpu_operation_mode.pending": 0})
    out = nvml(lib_dir, st, gom_body("""
        assert gom(0) == (0, 0, 0)
        assert L.nvmlDeviceSetGpuOperationMode(h(0), 3) == 2               # no such mode
        assert L.nvmlDeviceSetGpuOperationMode(h(0), 1) == 0               # compute: pending
        print(gom(0))
        assert reset(1, (ctypes.c_void_p * 1)(h(0))) == 0
        print(gom(0))
    """))
    assert out.splitlines() == ["(0, 0, 1)", "(0, 1, 1)"]


def test_clocks_locked_and_reset(lib_dir, state_file):
    st = state_file("h100")
    out = nvml(lib_dir, st, """
        def clock(i, kind):
            v = U(); assert L.nvmlDeviceGetClockInfo(h(i), kind, ctypes.byref(v)) == 0
            return v.value
        def app(i, kind):
            v = U(); assert L.nvmlDeviceGetApplicationsClock(h(i), kind, ctypes.byref(v)) == 0
            return v.value
        assert L.nvmlDeviceSetGpuLockedClocks(h(0), 1000, 1500) == 0
        assert L.nvmlDeviceSetGpuLockedClocks(h(0), 1500, 1000) == 2
        assert L.nvmlDeviceSetApplicationsClocks(h(0), 2619, 1755) == 0
        assert L.nvmlDeviceSetApplicationsClocks(h(0), 2619, 99999) == 2
        print(clock(0, 0), app(0, 0))
        assert L.nvmlDeviceResetGpuLockedClocks(h(0)) == 0 and L.nvmlDeviceResetApplicationsClocks(h(0)) == 0
        print(clock(0, 0), app(0, 0))
    """)
    # h100 profile: idle 345 MHz, default application clock 1980 MHz (reference/captures/qx-h100.xml)
    assert out.splitlines() == ["1000 1755", "345 1980"]


def test_setters_are_root_only(lib_dir, state_file):
    if os.geteuid() != 0:
        pytest.skip("needs root, to drop to another user")
    st = state_file("h100")
    nvml(lib_dir, st, """
        import os
        os.setresuid(65534, 65534, 65534)   # nobody, after loading the state as root
        assert L.nvmlDeviceSetPowerManagementLimit(h(0), 500000) == 4      # NO_PERMISSION
        assert L.nvmlDeviceSetEccMode(h(0), 0) == 4
        assert L.nvmlDeviceSetMigMode(h(0), 1, ctypes.byref(ctypes.c_int())) == 4
        assert limit(0) == 700000
    """)
    assert not record(st).exists()


def test_concurrent_setters_never_lose_an_update(lib_dir, state_file):
    st = state_file("h100")
    writers = [subprocess.Popen([sys.executable, "-c", PRELUDE + textwrap.dedent(f"""
        for k in range(25):
            assert L.nvmlDeviceSetPowerManagementLimit(h({i}), 300000 + 1000 * k + {i}) == 0
    """)], env=nvml_env(lib_dir, st)) for i in range(8)]
    assert [w.wait(timeout=120) for w in writers] == [0] * 8
    out = nvml(lib_dir, st, "print(*[limit(i) for i in range(8)])")
    assert out.split() == [str(300000 + 24000 + i) for i in range(8)]


def test_a_killed_writer_leaves_no_torn_record(lib_dir, state_file):
    st = state_file("h100")
    for attempt in range(12):
        writer = subprocess.Popen([sys.executable, "-c", PRELUDE + textwrap.dedent("""
            k = 0
            while True:
                k += 1
                assert L.nvmlDeviceSetPowerManagementLimit(h(k % 8), 200000 + k % 500000) == 0
        """)], env=nvml_env(lib_dir, st), stderr=subprocess.DEVNULL)
        time.sleep(0.05 + 0.013 * attempt)
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        if record(st).exists():
            values = parse_record(record(st))  # whole: header, lines, end
            assert all(200000 <= int(v) <= 700000 for v in values.values())
    out = nvml(lib_dir, st, "assert L.nvmlDeviceSetPowerManagementLimit(h(3), 333000) == 0; print(limit(3))")
    assert out.split() == ["333000"]


def test_readers_never_wait_for_a_writer(lib_dir, state_file):
    st = state_file("h100")
    nvml(lib_dir, st, "assert L.nvmlDeviceSetPowerManagementLimit(h(0), 400000) == 0")
    fd = os.open(lock_file(st), os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # a writer holds the record's lock
        t0 = time.monotonic()
        assert nvml(lib_dir, st, "print(limit(0))").split() == ["400000"]
        assert time.monotonic() - t0 < 10
        setter = subprocess.Popen([sys.executable, "-c", PRELUDE + textwrap.dedent("""
            assert L.nvmlDeviceSetPowerManagementLimit(h(1), 450000) == 0
        """)], env=nvml_env(lib_dir, st))
        with pytest.raises(subprocess.TimeoutExpired):
            setter.wait(timeout=1.5)  # a second writer waits for the lock ...
    finally:
        os.close(fd)
    assert setter.wait(timeout=30) == 0  # ... and lands once it is free
    assert nvml(lib_dir, st, "print(limit(0), limit(1))").split() == ["400000", "450000"]


def test_a_lock_any_user_can_take_does_not_hold_up_a_setter(lib_dir, state_file):
    """The writers' lock was a flock on the record's directory, which any user can open: setters then hung."""
    st = state_file("h100")
    fd = os.open(st.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        assert nvml(lib_dir, st, """
            assert L.nvmlDeviceSetPowerManagementLimit(h(0), 400000) == 0
            print(limit(0))
        """).split() == ["400000"]
    finally:
        os.close(fd)
    assert lock_file(st).stat().st_mode & 0o777 == 0o600


def test_a_held_lock_makes_a_setter_give_up_naming_the_holder(lib_dir, state_file):
    st = state_file("h100")
    nvml(lib_dir, st, "assert L.nvmlDeviceSetPowerManagementLimit(h(0), 400000) == 0")
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDONLY); "
        "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)"), str(lock_file(st))],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, "-c", PRELUDE + "print(L.nvmlDeviceSetPowerManagementLimit(h(0), 450000))"],
                           env=nvml_env(lib_dir, st, MOKKA_LOCK_TIMEOUT_S="0.5"), capture_output=True, text=True,
                           timeout=30)
        assert 0.5 <= time.monotonic() - t0 < 10
    finally:
        holder.kill()
        holder.communicate()
    assert p.stdout.split() == ["10"]  # NVML_ERROR_TIMEOUT, nothing written
    assert f"held by pid {holder.pid}" in p.stderr and "MOKKA_LOCK_TIMEOUT_S" in p.stderr
    assert nvml(lib_dir, st, "print(limit(0))").split() == ["400000"]


def test_bad_record_is_ignored_and_logged(lib_dir, state_file):
    st = state_file("h100")
    record(st).write_text("mokka-nvml-settings 1\ndevice.0.power.limit_mw=lots\nend\n")
    p = subprocess.run([sys.executable, "-c", PRELUDE + "print(limit(0))"], env=nvml_env(lib_dir, st),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.split() == ["700000"]
    assert "setter record" in p.stderr and "bad value for device.0.power.limit_mw" in p.stderr


def test_a_setting_reaches_a_running_reader(lib_dir, state_file):
    """Each setting another process makes arrives (how fast, 5 ms at most, is `tox -e bench`'s measure)."""
    st = state_file("h100")
    p = subprocess.run([sys.executable, "-c", SETTING_READER, "10", "2.0"], env=nvml_env(lib_dir, st),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert len(p.stdout.split()) == 10
