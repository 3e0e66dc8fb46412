"""The NVML GPM API through ctypes: support by architecture, samples, and metrics as delta / time."""
from __future__ import annotations

import textwrap

from test_library import run

GPM = textwrap.dedent("""
    MAX = 477  # NVML_GPM_METRIC_MAX of the 13.x header (older callers pass a shorter array: numMetrics bounds it)
    class Info(ctypes.Structure):
        _fields_ = [("short", ctypes.c_char_p), ("long", ctypes.c_char_p), ("unit", ctypes.c_char_p)]
    class Metric(ctypes.Structure):
        _fields_ = [("id", U), ("ret", ctypes.c_int), ("value", ctypes.c_double), ("info", Info)]
    class Get(ctypes.Structure):
        _fields_ = [("version", U), ("num", U), ("s1", ctypes.c_void_p), ("s2", ctypes.c_void_p),
                    ("metrics", Metric * MAX)]
    class Support(ctypes.Structure):
        _fields_ = [("version", U), ("supported", U)]
    def supported(d):
        s = Support(1, 7); assert L.nvmlGpmQueryDeviceSupport(d, ctypes.byref(s)) == 0; return s.supported
    def sample():
        s = ctypes.c_void_p(); assert L.nvmlGpmSampleAlloc(ctypes.byref(s)) == 0; return s
    def metrics(s1, s2, ids):
        g = Get(1, len(ids), s1, s2)
        for i, m in enumerate(ids): g.metrics[i].id = m
        assert L.nvmlGpmMetricsGet(ctypes.byref(g)) == 0
        return {m: (g.metrics[i].ret, g.metrics[i].value, g.metrics[i].info.unit) for i, m in enumerate(ids)}
""")


def scenario(body: str) -> str:
    return GPM + textwrap.dedent(body)


def test_hopper_answers_and_earlier_boards_do_not(lib_dir, state_file) -> None:
    run(lib_dir, state_file("a100"), scenario("""
        assert L.nvmlInit_v2() == 0
        d = h(0)[1]
        assert supported(d) == 0
        s = sample()
        assert L.nvmlGpmSampleGet(d, s) == 3                     # NOT_SUPPORTED
        assert L.nvmlGpmQueryIfStreamingEnabled(d, ctypes.byref(U())) == 3
        assert L.nvmlGpmSampleFree(s) == 0
    """))
    run(lib_dir, state_file("h100"), scenario("""
        assert L.nvmlInit_v2() == 0
        d = h(0)[1]
        assert supported(d) == 1
        assert L.nvmlGpmQueryDeviceSupport(d, ctypes.byref(Support(2, 0))) == 25   # ARGUMENT_VERSION_MISMATCH
        state = U(9)
        assert L.nvmlGpmQueryIfStreamingEnabled(d, ctypes.byref(state)) == 0 and state.value == 0
        assert L.nvmlGpmSetStreamingEnabled(d, 1) == 0
        assert L.nvmlGpmQueryIfStreamingEnabled(d, ctypes.byref(state)) == 0 and state.value == 1
        assert L.nvmlGpmSetStreamingEnabled(d, 2) == 2
    """))


def test_metrics_are_rates_and_activity_from_two_samples(lib_dir, state_file) -> None:
    st = state_file("h100", overrides={"device.0.utilization.gpu": 80, "device.0.utilization.memory": 30,
                                       "device.0.utilization.decoder": 10, "device.0.gpm.pcie_tx_mib_per_sec": 3000,
                                       "device.0.gpm.pcie_rx_mib_per_sec": 1000})
    run(lib_dir, st, scenario("""
        assert L.nvmlInit_v2() == 0
        d = h(0)[1]
        a, b = sample(), sample()
        assert L.nvmlGpmSampleGet(d, a) == 0
        time.sleep(0.2)
        assert L.nvmlGpmSampleGet(d, b) == 0
        m = metrics(a, b, [1, 2, 3, 5, 7, 6, 10, 20, 21, 30, 60, 62, 98, 99, 101])
        assert m[2] == (0, 80.0, b"%") and m[1][1] == 80.0     # SM activity is the utilization
        assert m[3][1] == 40.0 and m[5][1] == 40.0 and m[7][1] == 40.0 and m[6][1] == 0.0   # the documented mix
        assert m[10][1] == 30.0 and m[30][1] == 10.0            # DRAM bandwidth, NVDEC 0
        assert abs(m[20][1] - 3000) < 1 and abs(m[21][1] - 1000) < 1 and m[20][2] == b"MiB/s"
        assert m[60][:2] == (0, 0.0) and m[62][:2] == (0, 0.0)  # NVLink counters that did not move
        assert m[98][0] == 3 and m[99][0] == 3 and m[101][0] == 3   # ids it does not simulate: NOT_SUPPORTED
        assert metrics(b, a, [20])[20][0] == 0                 # either order: the older sample is the base
        g = Get(1, 1, a, a); g.metrics[0].id = 2
        assert L.nvmlGpmMetricsGet(ctypes.byref(g)) == 0 and g.metrics[0].ret == 2   # no time between: no rate
        assert L.nvmlGpmMetricsGet(ctypes.byref(Get(1, 0, a, b))) == 2
        assert L.nvmlGpmMetricsGet(ctypes.byref(Get(1, 1, a, sample()))) == 2         # an empty sample
        assert L.nvmlGpmMetricsGet(ctypes.byref(Get(2, 1, a, b))) == 25
    """))


def test_nvlink_rates_follow_the_link_counters(lib_dir, state_file) -> None:
    st = state_file("h100")
    run(lib_dir, st, scenario(f"""
        assert L.nvmlInit_v2() == 0
        d = h(0)[1]
        a, b = sample(), sample()
        assert L.nvmlGpmSampleGet(d, a) == 0
        t0 = time.monotonic()
        write_state({str(st)!r}, make_state("h100", overrides={{"device.0.nvlink.1.tx_bytes": 512 << 20}}))
        time.sleep(0.3)
        assert L.nvmlGpmSampleGet(d, b) == 0
        dt = time.monotonic() - t0
        m = metrics(a, b, [61, 65, 63])
        assert m[63][1] == 0.0                                  # link 0 still
        assert abs(m[65][1] - 512 / dt) < 512 / dt * 0.1 and abs(m[61][1] - m[65][1]) < 1e-6
    """))


def test_mig_samples_name_an_existing_gpu_instance(lib_dir, state_file) -> None:
    run(lib_dir, state_file("h100"), scenario("""
        assert L.nvmlInit_v2() == 0
        d, s = h(0)[1], sample()
        assert L.nvmlGpmMigSampleGet(d, 1, s) == 3             # MIG is off
        assert L.nvmlGpmSampleGet(d, None) == 2
    """))


def test_activity_is_the_time_weighted_mean_between_the_samples(lib_dir, state_file) -> None:
    st = state_file("h100", overrides={"device.0.utilization.gpu": 80})
    run(lib_dir, st, scenario(f"""
        assert L.nvmlInit_v2() == 0
        d = h(0)[1]
        a, b, c = sample(), sample(), sample()
        assert L.nvmlGpmSampleGet(d, a) == 0; ta = time.monotonic()
        time.sleep(0.3)
        assert L.nvmlGpmSampleGet(d, b) == 0; tb = time.monotonic()
        write_state({str(st)!r}, make_state("h100", overrides={{"device.0.utilization.gpu": 20}}))
        time.sleep(0.3)
        assert L.nvmlGpmSampleGet(d, c) == 0; tc = time.monotonic()   # reads 20: it holds since sample b
        assert metrics(a, b, [2])[2][1] == 80.0 and metrics(b, c, [2])[2][1] == 20.0
        expected = (80 * (tb - ta) + 20 * (tc - tb)) / (tc - ta)
        assert abs(metrics(a, c, [2])[2][1] - expected) < 0.1
    """))
