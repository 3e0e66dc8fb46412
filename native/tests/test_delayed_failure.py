"""A failure that starts after NVML calls on the GPU (failure.after_calls, .probability, .seed): counted in
each process, one process per scenario."""
from __future__ import annotations

import textwrap

from test_library import run

LOST, OFF_BUS, ECC = 1, 2, 3
GPU_IS_LOST, NOT_SUPPORTED, TIMEOUT = 15, 3, 10


def delayed(gpu: int, mode: int, after: int = 0, ppb: int = 10**9, seed: int = 0, xid: int = 0) -> dict:
    at = f"device.{gpu}.failure."
    return {at + "mode": mode, at + "after_calls": after, at + "probability_ppb": ppb, at + "seed": seed,
            at + "xid": xid}


def splitmix64(x: int) -> int:
    """The draw native/README.md documents, written out independently of the C code."""
    mask = (1 << 64) - 1
    x = (x + 0x9E3779B97F4A7C15) & mask
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & mask
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & mask
    return x ^ (x >> 31)


def first_failing_call(after: int, ppb: int, seed: int) -> int:
    k = 1
    while splitmix64(seed + k) % 10**9 >= ppb:
        k += 1
    return after + k


COUNT = textwrap.dedent("""
    def calls_until_lost(d, limit):
        for n in range(1, limit + 1):
            r, _ = temp(d)
            if r == 15:
                return n
            assert r == 0, r
        return None
""")


def test_after_calls_boundary(lib_dir, state_file) -> None:
    st = state_file("h100", overrides=delayed(3, LOST, after=5))
    run(lib_dir, st, COUNT + textwrap.dedent("""
        assert L.nvmlInit_v2() == 0
        r, d = h(3); assert r == 0                        # call 1 on GPU 3
        for n in range(2, 6):
            assert temp(d) == (0, 34), n                  # calls 2..5 answer normally
        assert temp(d)[0] == 15                           # call 6: lost
        assert temp(d)[0] == 15 and h(3)[0] == 0          # and stays lost; the handle stays (attached before)
        r, d2 = h(2); assert r == 0 and temp(d2) == (0, 34)   # the other GPUs count on their own
    """))


def test_the_count_is_per_process(lib_dir, state_file) -> None:
    st = state_file("h100", overrides=delayed(0, OFF_BUS, after=3))
    body = COUNT + textwrap.dedent("""
        assert L.nvmlInit_v2() == 0
        r, d = h(0); assert r == 0
        assert calls_until_lost(d, 10) == 3               # handle + 2 calls, then the 4th call is lost
    """)
    run(lib_dir, st, body)
    run(lib_dir, st, body)                                # a new process starts counting anew


def test_probability_zero_never_starts_and_one_starts_at_once(lib_dir, state_file) -> None:
    st = state_file("h100", overrides={**delayed(1, LOST, ppb=0), **delayed(2, LOST, after=4, ppb=10**9)})
    run(lib_dir, st, COUNT + textwrap.dedent("""
        assert L.nvmlInit_v2() == 0
        assert calls_until_lost(h(1)[1], 20000) is None
        r, d = h(2); assert r == 0
        assert calls_until_lost(d, 10) == 4               # probability 1: the first call past after_calls
    """))


def test_the_same_seed_starts_the_failure_at_the_same_call(lib_dir, state_file) -> None:
    expected = {seed: first_failing_call(2, 50_000_000, seed) for seed in (7, 8)}
    assert expected[7] != expected[8]
    for seed in (7, 7, 8):
        st = state_file("h100", overrides=delayed(4, LOST, after=2, ppb=50_000_000, seed=seed))
        run(lib_dir, st, COUNT + textwrap.dedent(f"""
            assert L.nvmlInit_v2() == 0
            r, d = h(4); assert r == 0
            assert 1 + calls_until_lost(d, 100000) == {expected[seed]}   # the handle lookup was call 1
        """))


def test_uncorrectable_ecc_starts_as_the_static_mode_shows_it(lib_dir, state_file) -> None:
    st = state_file("h100", overrides=delayed(0, ECC, after=3))
    run(lib_dir, st, """
        c = ctypes.c_ulonglong
        assert L.nvmlInit_v2() == 0
        r, d = h(0)                                       # call 1
        def dbe(kind):
            n = c(); assert L.nvmlDeviceGetTotalEccErrors(d, 1, kind, ctypes.byref(n)) == 0; return n.value
        assert dbe(0) == 0 and dbe(1) == 0                # calls 2, 3
        assert dbe(0) == 1 and dbe(1) == 1                # call 4: one uncorrected error, volatile and aggregate
        cor, unc, pending, failure = U(), U(), U(), U()
        assert L.nvmlDeviceGetRemappedRows(d, *(ctypes.byref(x) for x in (cor, unc, pending, failure))) == 0
        assert unc.value == 1 and failure.value == 1
        assert temp(d) == (0, 34)                         # the GPU itself still answers
    """)


def test_the_failure_xid_is_delivered_once_to_the_sets_that_wait(lib_dir, state_file) -> None:
    st = state_file("h100", overrides=delayed(6, OFF_BUS, after=10, xid=0) | {"device.6.failure.xid": 79})
    run(lib_dir, st, COUNT + textwrap.dedent("""
        class Ev(ctypes.Structure):
            _fields_ = [("device", ctypes.c_void_p), ("eventType", ctypes.c_ulonglong),
                        ("eventData", ctypes.c_ulonglong), ("gi", U), ("ci", U)]
        assert L.nvmlInit_v2() == 0
        s = ctypes.c_void_p(); assert L.nvmlEventSetCreate(ctypes.byref(s)) == 0
        r, d = h(6)
        assert L.nvmlDeviceRegisterEvents(d, 8, s) == 0
        e = Ev()
        assert L.nvmlEventSetWait_v2(s, ctypes.byref(e), 20) == 10      # not started yet: nothing
        assert calls_until_lost(d, 20) == 9                             # handle + register + 8 calls
        assert L.nvmlEventSetWait_v2(s, ctypes.byref(e), 1000) == 0
        assert e.eventType == 8 and e.eventData == 79 and e.device == d.value
        assert L.nvmlEventSetWait_v2(s, ctypes.byref(e), 20) == 10      # once
        late = ctypes.c_void_p(); assert L.nvmlEventSetCreate(ctypes.byref(late)) == 0
        assert L.nvmlEventSetWait_v2(late, ctypes.byref(e), 20) == 10   # a set made afterwards: an old event
    """))


def test_healing_the_gpu_in_the_file_clears_the_started_failure(lib_dir, state_file) -> None:
    st = state_file("h100", overrides=delayed(5, LOST, after=1))
    run(lib_dir, st, COUNT + textwrap.dedent(f"""
        from mkstate import make_state, write_state
        assert L.nvmlInit_v2() == 0
        r, d = h(5)
        assert temp(d)[0] == 15
        write_state({str(st)!r}, make_state("h100"))
        t0 = time.monotonic()
        while temp(d)[0] != 0:
            assert time.monotonic() - t0 < 2
    """))

