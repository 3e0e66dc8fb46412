"""The library through ctypes, each scenario in its own process (the state path is per process)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import nvml_env

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
    def temp(d):
        t = U()
        r = L.nvmlDeviceGetTemperature(d, 0, ctypes.byref(t))
        return r, t.value
""")


def run(lib_dir: Path, state: Path | None, body: str, expect_rc: int = 0, **env: str) -> subprocess.CompletedProcess:
    code = PRELUDE % {"tests": str(Path(__file__).parent)} + textwrap.dedent(body)
    p = subprocess.run([sys.executable, "-c", code], env=nvml_env(lib_dir, state, **env), capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == expect_rc, f"rc={p.returncode}\nstdout:{p.stdout}\nstderr:{p.stderr}"
    return p


def test_init_count_getters(lib_dir, state_file):
    st = state_file("h100")
    run(lib_dir, st, """
        assert L.nvmlDeviceGetCount_v2(ctypes.byref(U())) == 1          # before init: UNINITIALIZED
        assert L.nvmlInitWithFlags(0) == 0
        n = U(); assert L.nvmlDeviceGetCount_v2(ctypes.byref(n)) == 0 and n.value == 8
        r, d = h(0); assert r == 0
        assert temp(d) == (0, 34)
        assert L.nvmlDeviceGetTemperature(d, 0, None) == 2               # NULL -> INVALID_ARGUMENT
        assert L.nvmlDeviceGetHandleByIndex_v2(8, ctypes.byref(ctypes.c_void_p())) == 2
        buf = ctypes.create_string_buffer(96)
        assert L.nvmlDeviceGetName(d, buf, 96) == 0 and buf.value == b"NVIDIA H100 80GB HBM3"
        assert L.nvmlDeviceGetName(d, buf, 5) == 7                       # INSUFFICIENT_SIZE
        assert L.nvmlDeviceGetTemperature(ctypes.c_void_p(12345), 0, ctypes.byref(U())) == 2
        assert L.nvmlInit_v2() == 0 and L.nvmlShutdown() == 0             # ref-counted
        assert L.nvmlDeviceGetCount_v2(ctypes.byref(n)) == 0
        assert L.nvmlShutdown() == 0 and L.nvmlShutdown() == 1
        assert L.nvmlDeviceGetCount_v2(ctypes.byref(n)) == 1
    """)


def test_string_getters_copy_every_length_and_nothing_past_it(lib_dir, state_file):
    """GetName (its length derived at load), GetUUID and GetSerial (measured per call) for strings of every length
    the state file allows: the exact string and its NUL; the caller's bytes after them untouched; one byte short
    of room is INSUFFICIENT_SIZE and leaves the buffer as it was."""
    st = state_file("h100")
    run(lib_dir, st, f"""
        import re
        base = open({str(st)!r}).read()
        for n in range(1, 96):
            value = "".join(chr(0x41 + (n + i) % 26) for i in range(n))
            serial = value[:31]
            text = re.sub(r"^device\\.0\\.(name|uuid|serial)=.*$",
                          lambda m: f"device.0.{{m[1]}}={{serial if m[1] == 'serial' else value}}", base, flags=re.M)
            write_state({str(st)!r}, text)
            assert L.nvmlInit_v2() == 0  # the first init refreshes: this process reads the new file now
            d = h(0)[1]
            for getter, want in (("nvmlDeviceGetName", value), ("nvmlDeviceGetUUID", value),
                                 ("nvmlDeviceGetSerial", serial)):
                size = len(want) + 1
                buf = (ctypes.c_char * 100)(*([b"#"] * 100))
                assert getattr(L, getter)(d, buf, size - 1) == 7, (getter, n)  # INSUFFICIENT_SIZE
                assert buf.raw == b"#" * 100, (getter, n)
                assert getattr(L, getter)(d, buf, size) == 0, (getter, n)
                assert buf.raw == want.encode() + b"\\0" + b"#" * (99 - len(want)), (getter, n, buf.raw)
            L.nvmlShutdown()
    """)


def test_struct_versions(lib_dir, state_file):
    st = state_file("h100")
    run(lib_dir, st, """
        class Mem2(ctypes.Structure):
            _fields_ = [("version", U), ("total", ctypes.c_ulonglong), ("reserved", ctypes.c_ulonglong),
                        ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]
        assert ctypes.sizeof(Mem2) == 40
        L.nvmlInit_v2(); r, d = h(2)
        m = Mem2(version=0x02000028)
        assert L.nvmlDeviceGetMemoryInfo_v2(d, ctypes.byref(m)) == 0
        assert m.total == 81559 << 20 and m.reserved == 480 << 20 and m.free == m.total - m.reserved - m.used
        m = Mem2(version=0x01000028)
        assert L.nvmlDeviceGetMemoryInfo_v2(d, ctypes.byref(m)) == 25     # ARGUMENT_VERSION_MISMATCH
        # PCI v1 must not write past its 36-byte layout; v3 fills busId
        buf = (ctypes.c_ubyte * 68)(*([0xAB] * 68))
        assert L.nvmlDeviceGetPciInfo(d, buf) == 0
        assert bytes(buf[36:]) == b"\\xab" * 32
        assert bytes(buf[:16]).rstrip(b"\\0") == b"0000:52:00.0"
        assert L.nvmlDeviceGetPciInfo_v3(d, buf) == 0
        assert bytes(buf[36:68]).rstrip(b"\\0") == b"00000000:52:00.0"
    """)


def test_handle_lookups(lib_dir, state_file):
    st = state_file("h100")
    run(lib_dir, st, """
        from mkstate import rendered
        kv = dict(rendered("h100"))  # identities derived from the node; GPU 5 sits on bus C3 (DGX H100)
        L.nvmlInit_v2(); r, d5 = h(5)
        for q in [b"00000000:C3:00.0", b"0000:c3:00.0", b"C3:00.0", b"00000000:c3:00.0"]:
            d = ctypes.c_void_p()
            assert L.nvmlDeviceGetHandleByPciBusId_v2(q, ctypes.byref(d)) == 0, q
            assert d.value == d5.value
        d = ctypes.c_void_p()
        assert L.nvmlDeviceGetHandleByUUID(kv["device.5.uuid"].encode(), ctypes.byref(d)) == 0
        assert d.value == d5.value
        assert L.nvmlDeviceGetHandleBySerial(kv["device.5.serial"].encode(), ctypes.byref(d)) == 0
        assert d.value == d5.value
        assert L.nvmlDeviceGetHandleByUUID(b"GPU-nope", ctypes.byref(d)) == 6                # NOT_FOUND
        # handles are stable, dereferenceable memory
        r, again = h(5); assert again.value == d5.value
        ctypes.string_at(d5.value, 16)
        i = U(); assert L.nvmlDeviceGetIndex(d5, ctypes.byref(i)) == 0 and i.value == 5
    """)


def test_missing_file_fails_init_cleanly(lib_dir, tmp_path):
    p = run(lib_dir, tmp_path / "absent.state", """
        assert L.nvmlInit_v2() == 9
        assert L.nvmlInitWithFlags(0) == 9
        assert L.nvmlDeviceGetCount_v2(ctypes.byref(U())) == 1
    """)
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("mokka-nvml:")]
    assert len(lines) == 1 and "absent.state" in lines[0]


def test_truncated_and_garbled_files(lib_dir, state_file, tmp_path):
    good = state_file("t4")
    text = good.read_text()
    for bad in [text[: len(text) // 2], text.replace("end\n", ""), "garbage\n", "", "\0\0\0",
                text.replace("temperature.gpu=30", "temperature.gpu=hot"), text + "x=1\n"]:
        st = state_file(text=bad)
        p = run(lib_dir, st, "assert L.nvmlInit_v2() == 9\n")
        assert p.stderr.count("mokka-nvml:") == 1, p.stderr


def test_bad_update_keeps_last_good_snapshot(lib_dir, state_file):
    st = state_file("t4")
    p = run(lib_dir, st, f"""
        assert L.nvmlInit_v2() == 0; r, d = h(0)
        text = open({str(st)!r}).read()
        write_state({str(st)!r}, text[:100])                       # truncated
        time.sleep(0.05)
        for _ in range(3): assert temp(d) == (0, 30)
        write_state({str(st)!r}, text.replace("temperature.gpu=30", "temperature.gpu=77"))
        t0 = time.monotonic()
        while temp(d)[1] != 77:
            assert time.monotonic() - t0 < 1
        """)
    assert p.stderr.count("mokka-nvml:") == 1 and "keeping last good state" in p.stderr


def test_unknown_keys_are_ignored(lib_dir, state_file):
    st = state_file("t4", overrides={"system.future_key": "x", "device.0.some.new.thing": "1,2,3"})
    run(lib_dir, st, "assert L.nvmlInit_v2() == 0\n")


def test_versioned_structs_checked_alike(lib_dir, state_file):
    st = state_file("h100")
    run(lib_dir, st, """
        L.nvmlInit_v2(); r, d = h(0)
        for name in ("nvmlDeviceGetPciInfoExt", "nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetSramEccErrorStatus",
                     "nvmlDeviceGetRunningProcessDetailList", "nvmlDeviceGetGpuFabricInfoV",
                     "nvmlDeviceGetProcessesUtilizationInfo"):
            buf = ctypes.create_string_buffer(4096)                      # version 0
            assert getattr(L, name)(d, None) == 2, name                  # INVALID_ARGUMENT
            assert getattr(L, name)(d, buf) == 25, name                  # ARGUMENT_VERSION_MISMATCH
    """)


def test_two_handle_calls(lib_dir, state_file):
    st = state_file("h100")
    run(lib_dir, st, f"""
        L.nvmlInit_v2(); a = h(0)[1]; b = h(1)[1]; lost = h(3)[1]
        write_state({str(st)!r}, make_state("h100", overrides={{"device.3.lost": 1}}))
        t0 = time.monotonic()
        while temp(lost)[0] != 15:
            assert time.monotonic() - t0 < 1
        bad = ctypes.c_void_p(12345)
        out, same = U(), ctypes.c_int()
        calls = [lambda x, y: L.nvmlDeviceGetP2PStatus(x, y, 0, ctypes.byref(out)),
                 lambda x, y: L.nvmlDeviceOnSameBoard(x, y, ctypes.byref(same))]
        for call in calls:
            assert call(a, b) == 0
            assert call(a, bad) == 2 and call(a, None) == 2 and call(a, lost) == 15
            assert call(bad, lost) == 2 and call(lost, bad) == 15     # the first handle's error wins
        # the PCI path read at attach: a GPU lost since still answers (test_pynvml, lost after attach)
        ancestor = lambda x, y: L.nvmlDeviceGetTopologyCommonAncestor(x, y, ctypes.byref(out))
        assert ancestor(a, b) == 0 and ancestor(a, lost) == 0 and ancestor(lost, a) == 0
        assert ancestor(a, bad) == 2 and ancestor(a, None) == 2
        assert ancestor(bad, lost) == 2 and ancestor(lost, bad) == 2
        assert L.nvmlDeviceGetTopologyCommonAncestor(a, b, None) == 2
    """)


def test_init_error_and_lost_gpu(lib_dir, state_file):
    st = state_file("h100", overrides={"system.init_error": 18})
    run(lib_dir, st, "assert L.nvmlInit_v2() == 18\n")
    st = state_file("h100", overrides={"device.3.lost": 1})
    run(lib_dir, st, """
        from mkstate import rendered
        assert L.nvmlInit_v2() == 0
        assert h(3)[0] == 15 and h(2)[0] == 0 and h(4)[0] == 0
        d = ctypes.c_void_p()
        assert L.nvmlDeviceGetHandleByUUID(dict(rendered("h100"))["device.3.uuid"].encode(), ctypes.byref(d)) == 15
    """)


def test_gpu_lost_at_runtime(lib_dir, state_file):
    st = state_file("h100")
    run(lib_dir, st, f"""
        L.nvmlInit_v2(); r, d = h(5)
        write_state({str(st)!r}, make_state("h100", overrides={{"device.5.lost": 1}}))
        t0 = time.monotonic()
        while temp(d)[0] != 15:
            assert time.monotonic() - t0 < 1
        assert temp(h(4)[1]) == (0, 34)
    """)


def test_a_state_file_change_reaches_a_running_reader(lib_dir, state_file):
    st = state_file("h100")
    run(lib_dir, st, f"""
        L.nvmlInit_v2(); r, d = h(0)
        for k in range(20):
            write_state({str(st)!r}, make_state("h100", overrides={{"device.0.temperature.gpu": 40 + k}}))
            t0 = time.monotonic()
            while temp(d)[1] != 40 + k:
                assert time.monotonic() - t0 < 2, k  # how fast (20 ms median) is `tox -e bench`'s measure
    """)


def test_events_delivered_once_per_set(lib_dir, state_file):
    st = state_file("h100", events=[(1, 0, 31)])
    run(lib_dir, st, f"""
        class Ev(ctypes.Structure):
            _fields_ = [("device", ctypes.c_void_p), ("eventType", ctypes.c_ulonglong),
                        ("eventData", ctypes.c_ulonglong), ("gi", U), ("ci", U)]
        L.nvmlInit_v2()
        s1 = ctypes.c_void_p(); assert L.nvmlEventSetCreate(ctypes.byref(s1)) == 0
        for i in range(8):
            assert L.nvmlDeviceRegisterEvents(h(i)[1], 8, s1) == 0
        e = Ev()
        t0 = time.monotonic()
        assert L.nvmlEventSetWait_v2(s1, ctypes.byref(e), 50) == 10          # old event: not delivered
        assert 0.04 < time.monotonic() - t0 < 1
        def later():
            time.sleep(0.1)
            write_state({str(st)!r}, make_state("h100", events=[(1, 0, 31), (2, 6, 79)]))
        threading.Thread(target=later).start()
        assert L.nvmlEventSetWait_v2(s1, ctypes.byref(e), 5000) == 0
        assert e.eventType == 8 and e.eventData == 79 and e.device == h(6)[1].value and e.gi == 0xFFFFFFFF
        assert L.nvmlEventSetWait_v2(s1, ctypes.byref(e), 0) == 10
        s2 = ctypes.c_void_p(); L.nvmlEventSetCreate(ctypes.byref(s2))
        for i in range(8): L.nvmlDeviceRegisterEvents(h(i)[1], 8, s2)
        write_state({str(st)!r}, make_state("h100", events=[(1, 0, 31), (2, 6, 79), (3, 1, 48)]))
        for s in (s1, s2):
            assert L.nvmlEventSetWait_v2(s, ctypes.byref(e), 1000) == 0 and e.eventData == 48
            assert L.nvmlEventSetWait_v2(s, ctypes.byref(e), 0) == 10
        assert L.nvmlEventSetFree(s1) == 0 and L.nvmlEventSetFree(s2) == 0
    """)


def test_threads_hammer_while_file_changes(lib_dir, state_file):
    st = state_file("h100")
    run(lib_dir, st, f"""
        L.nvmlInit_v2()
        stop = False; errors = []
        def reader(i):
            r, d = h(i % 8)
            while not stop:
                r, t = temp(d)
                if r != 0 or not 30 <= t < 60: errors.append((r, t))
        ts = [threading.Thread(target=reader, args=(i,)) for i in range(4)]
        for t in ts: t.start()
        for k in range(60):
            temps = {{f"device.{{i}}.temperature.gpu": 30 + k % 30 for i in range(8)}}
            write_state({str(st)!r}, make_state("h100", overrides=temps))
            time.sleep(0.003)
        stop = True
        for t in ts: t.join()
        assert not errors, errors[:5]
    """)


def test_state_found_next_to_library_without_env(lib_dir, tmp_path):
    d = tmp_path / "lib"
    d.mkdir()
    real = (lib_dir / "libnvidia-ml.so.1").resolve()
    shutil.copy(real, d / real.name)
    os.symlink(real.name, d / "libnvidia-ml.so.1")
    sys.path.insert(0, str(Path(__file__).parent))
    from mkstate import make_state, write_state
    write_state(d / "mokka-nvml.state", make_state("t4"))
    env = nvml_env(d, None)
    code = "import ctypes; L = ctypes.CDLL('libnvidia-ml.so.1'); assert L.nvmlInit_v2() == 0"
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=30)


def test_export_table(lib_dir, state_file):
    st = state_file("h100", overrides={"device.1.process.0.pid": 4321, "device.1.process.0.name": "train.py",
                                       "device.1.process.0.used_bytes": 3 << 30})
    run(lib_dir, st, """
        L.nvmlInit_v2()
        uuid = bytes.fromhex("c4fe3e6cc98f6c4ea327ee696e12f7c4")
        t = ctypes.POINTER(ctypes.c_void_p)()
        assert L.nvmlInternalGetExportTable(ctypes.byref(t), uuid) == 0
        assert t[0] == 256 * 8 and t[26] is None
        f23 = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int))(t[23])
        out = ctypes.c_int()
        assert f23(b"00000000:1B:00.0", b"00000000:DF:00.0", ctypes.byref(out)) == 0 and out.value == 4 + 18
        proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(U), ctypes.c_void_p, ctypes.c_void_p)
        f213 = proto(t[213])
        buf = ctypes.create_string_buffer(4128 * 4); n = U(4)
        assert f213(h(1)[1], ctypes.byref(n), buf, None) == 0 and n.value == 1
        assert int.from_bytes(buf.raw[0:4], "little") == 4321 and buf.raw[32:40] == b"train.py"
        assert f213(h(0)[1], ctypes.byref(n), buf, None) == 0 and n.value == 0
        other = ctypes.POINTER(ctypes.c_void_p)()
        assert L.nvmlInternalGetExportTable(ctypes.byref(other), b"\\x01" * 16) == 0 and not other[0]
    """)


def test_field_values_and_nvlink(lib_dir, state_file):
    st = state_file("a100", overrides={"device.0.nvlink.3.errors.replay": 7})
    run(lib_dir, st, """
        class FV(ctypes.Structure):
            _fields_ = [("fieldId", U), ("scopeId", U), ("timestamp", ctypes.c_longlong),
                        ("latencyUsec", ctypes.c_longlong), ("valueType", U), ("nvmlReturn", U),
                        ("value", ctypes.c_ulonglong)]
        L.nvmlInit_v2(); r, d = h(0)
        ids = [(91, 0), (90, 0), (165, 3), (161, 3), (187, 0), (1, 0), (9999, 0)]
        arr = (FV * len(ids))(*[FV(fieldId=i, scopeId=s) for i, s in ids])
        assert L.nvmlDeviceGetFieldValues(d, len(ids), arr) == 0
        got = [(f.nvmlReturn, f.value) for f in arr]
        assert got[0] == (0, 12) and got[1] == (0, 25781) and got[2] == (0, 1) and got[3] == (0, 7)
        assert got[4] == (0, 100000) and got[5] == (0, 1) and got[6][0] == 3
        st = U(); assert L.nvmlDeviceGetNvLinkState(d, 11, ctypes.byref(st)) == 0 and st.value == 1
        assert L.nvmlDeviceGetNvLinkState(d, 12, ctypes.byref(st)) == 3
        assert L.nvmlDeviceGetNvLinkState(d, 18, ctypes.byref(st)) == 2
    """)


def test_dynamic_metrics(lib_dir, state_file):
    dyn = {"device.1.dynamic.seed": 42, "device.1.dynamic.utilization": 1, "device.1.dynamic.utilization.pattern": 2,
           "device.1.dynamic.utilization.gpu_min": 20, "device.1.dynamic.utilization.gpu_max": 100,
           "device.1.dynamic.temperature": 1, "device.1.dynamic.temperature.base_c": 50,
           "device.1.dynamic.temperature.variance_c": 3, "device.1.dynamic.temperature.ramp_c": 10,
           "device.1.dynamic.power": 1, "device.1.dynamic.power.base_mw": 650000,
           "device.1.dynamic.power.variance_mw": 100000}
    st = state_file("h100", overrides=dyn)
    p = run(lib_dir, st, """
        class Util(ctypes.Structure):
            _fields_ = [("gpu", U), ("memory", U)]
        L.nvmlInit_v2(); d = h(1)[1]
        seen = set()
        t0 = time.time()
        while time.time() - t0 < 2.2:
            u = Util(); assert L.nvmlDeviceGetUtilizationRates(d, ctypes.byref(u)) == 0
            assert 80 <= u.gpu <= 100, u.gpu          # busy: top quarter of 20..100
            r, t = temp(d); assert r == 0 and 47 <= t <= 63, t
            w = U(); assert L.nvmlDeviceGetPowerUsage(d, ctypes.byref(w)) == 0
            assert 550000 <= w.value <= 700000, w.value  # clamped to the max limit
            seen.add((int(time.time()), u.gpu, t, w.value))
            time.sleep(0.05)
        assert len({s[1:] for s in seen}) >= 2                               # values move with time
        assert temp(h(0)[1]) == (0, 34)                                      # static devices stay static
        print(sorted(seen)[-1])
    """)
    assert p.stdout


def test_dynamic_values_are_one_per_second_across_threads_and_snapshots(lib_dir, state_file):
    """The model is evaluated when a snapshot is published and when the second turns, while other threads read:
    every thread reads the same values for a second (a new snapshot of the same second too) and a reading at a
    boundary is the last second's or the next one's, never a pair of the two."""
    dyn = {"device.1.dynamic.utilization": 1, "device.1.dynamic.temperature": 1,
           "device.1.dynamic.temperature.base_c": 50, "device.1.dynamic.temperature.variance_c": 20}
    st = state_file("h100", overrides=dyn)
    p = run(lib_dir, st, f"""
        class Util(ctypes.Structure):
            _fields_ = [("gpu", U), ("memory", U)]
        L.nvmlInit_v2(); d = h(1)[1]
        stop = False; readings = []
        def reader():
            u = Util(); t = U(); mine = []
            while not stop:
                before = time.time()
                assert L.nvmlDeviceGetUtilizationRates(d, ctypes.byref(u)) == 0
                assert L.nvmlDeviceGetTemperature(d, 0, ctypes.byref(t)) == 0
                mine.append((before, time.time(), (u.gpu, u.memory), t.value))
            readings.extend(mine)
        ts = [threading.Thread(target=reader) for _ in range(4)]
        for t in ts: t.start()
        t0 = time.time(); k = 0
        while time.time() - t0 < 3.2:  # a new snapshot every few ms, of the same dynamic devices
            overrides = {{**{dyn!r}, "device.0.temperature.gpu": 30 + k % 20}}
            write_state({str(st)!r}, make_state("h100", overrides=overrides))
            k += 1; time.sleep(0.002)
        stop = True
        for t in ts: t.join()
        per_second = {{}}
        for before, after, util, temp in readings:  # clear of the boundary by more than a tick and a refresh
            if int(before) == int(after) and before % 1 > 0.1:
                per_second.setdefault(int(before), set()).add(util)
        assert len(per_second) >= 2 and all(len(v) == 1 for v in per_second.values()), per_second
        one = {{sec: next(iter(v)) for sec, v in per_second.items()}}
        for before, after, util, temp in readings:
            # just after a boundary: the last second's too
            first = int(before) - 1 if before % 1 <= 0.1 else int(before)
            candidates = range(first, int(after) + 1)
            if any(sec not in one for sec in candidates):
                continue  # a second that was never read clear (the first or the last one) cannot be checked against
            assert util in [one[sec] for sec in candidates], (before, after, util, candidates)
            assert 30 <= temp <= 70, temp
        assert len(set(one.values())) >= 2  # the values move with the second
        print(len(readings), len(one), k)
    """)
    assert p.stdout


def test_fork_while_threads_refresh(lib_dir, state_file):
    st = state_file("h100")
    run(lib_dir, st, f"""
        L.nvmlInit_v2(); stop = False
        def churn():
            k = 0
            while not stop:
                write_state({str(st)!r}, make_state("h100", overrides={{"device.0.temperature.gpu": 30 + k % 20}}))
                k += 1
        def reader():
            d = h(0)[1]
            while not stop: temp(d)
        ts = [threading.Thread(target=churn), threading.Thread(target=reader)]
        for t in ts: t.start()
        for _ in range(30):
            pid = os.fork()
            if pid == 0:
                # the child re-initialises NVML (forced refresh takes the lock) and reads
                rc = L.nvmlInit_v2() or temp(h(0)[1])[0]
                os._exit(rc)
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0
        stop = True
        for t in ts: t.join()
    """)


def test_process_utilization(lib_dir, state_file):
    st = state_file("h100", overrides={"device.0.process.0.pid": 77, "device.0.process.0.sm_util": 55,
                                       "device.0.process.1.pid": 77, "device.0.process.1.type": 1,
                                       "device.0.process.2.pid": 88, "device.0.process.2.mem_util": 9})
    run(lib_dir, st, """
        class PU(ctypes.Structure):
            _fields_ = [("ts", ctypes.c_ulonglong), ("pid", U), ("sm", U), ("mem", U), ("enc", U), ("dec", U),
                        ("jpg", U), ("ofa", U)]
        class Info(ctypes.Structure):
            _fields_ = [("version", U), ("count", U), ("last", ctypes.c_ulonglong), ("arr", ctypes.POINTER(PU))]
        L.nvmlInit_v2(); d = h(0)[1]
        info = Info(version=(1 << 24) | ctypes.sizeof(Info))
        assert L.nvmlDeviceGetProcessesUtilizationInfo(d, ctypes.byref(info)) == 7 and info.count == 2
        arr = (PU * 2)(); info.arr = arr
        assert L.nvmlDeviceGetProcessesUtilizationInfo(d, ctypes.byref(info)) == 0
        assert [(p.pid, p.sm, p.mem) for p in arr] == [(77, 55, 0), (88, 0, 9)]
        info.version = 0
        assert L.nvmlDeviceGetProcessesUtilizationInfo(d, ctypes.byref(info)) == 25
    """)


def test_conf_compute_capable_only_where_every_gpu_is(lib_dir, state_file):
    body = """
        class Caps(ctypes.Structure):
            _fields_ = [("cpu", U), ("gpus", U)]
        class State(ctypes.Structure):
            _fields_ = [("environment", U), ("feature", U), ("devtools", U)]
        assert L.nvmlInit_v2() == 0
        c, s = Caps(9, 9), State(9, 9, 9)
        assert L.nvmlSystemGetConfComputeCapabilities(ctypes.byref(c)) == 0
        assert L.nvmlSystemGetConfComputeState(ctypes.byref(s)) == 0
        assert (s.environment, s.feature, s.devtools) == (0, 0, 0)   # CC mode off: no confidential VM
        print(c.cpu, c.gpus)
    """
    every = {f"device.{i}.conf_compute.supported": 1 for i in range(8)}
    assert run(lib_dir, state_file("h100", overrides=every), body).stdout.split() == ["0", "1"]
    some = every | {"device.7.conf_compute.supported": None}
    assert run(lib_dir, state_file("h100", overrides=some), body).stdout.split() == ["0", "0"]


def test_target_fan_speed(lib_dir, state_file):
    body = """
        assert L.nvmlInit_v2() == 0
        d, v = h(0)[1], U()
        r = L.nvmlDeviceGetTargetFanSpeed(d, 0, ctypes.byref(v))
        s = U(); L.nvmlDeviceGetFanSpeed_v2(d, 0, ctypes.byref(s))
        print(r, v.value, s.value, L.nvmlDeviceGetTargetFanSpeed(d, 1, ctypes.byref(v)))
    """
    fan = {"device.0.fan.count": 1, "device.0.fan.speed": 30}
    assert run(lib_dir, state_file("h100", overrides=fan | {"device.0.fan.target_speed": 45}), body).stdout.split() == [
        "0", "45", "30", "2"]
    assert run(lib_dir, state_file("h100", overrides=fan), body).stdout.split()[:2] == ["0", "30"]  # unset: the speed
    assert run(lib_dir, state_file("h100"), body).stdout.split()[0] == "3"  # no fans (every capture): N/A
