"""nvidia-ml-py (pynvml) as a monitoring tool uses it, in a subprocess per scenario."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import consumers, nvml_env

PRELUDE = textwrap.dedent("""
    import ctypes, sys, time
    sys.path.insert(0, %(tests)r)
    from mkstate import make_state, write_state
    import pynvml as N
""")


def run(lib_dir: Path, state: Path, body: str) -> subprocess.CompletedProcess:
    consumers.pynvml()  # skip / fail when nvidia-ml-py is missing
    code = PRELUDE % {"tests": str(Path(__file__).parent)} + textwrap.dedent(body)
    p = subprocess.run([sys.executable, "-c", code], env=nvml_env(lib_dir, state), capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, f"stdout:{p.stdout}\nstderr:{p.stderr}"
    return p


def test_common_getters(lib_dir, state_file):
    st = state_file("h100", overrides={"device.0.process.0.pid": 999, "device.0.process.0.name": "trainer",
                                       "device.0.process.0.used_bytes": 1 << 30})
    run(lib_dir, st, """
        from mkstate import rendered
        kv = dict(rendered("h100"))  # identities (UUID, serial) are derived from the node
        N.nvmlInit()
        assert N.nvmlSystemGetDriverVersion() == "550.163.01"
        assert N.nvmlSystemGetNVMLVersion() == "12.550.163.01"
        assert N.nvmlSystemGetCudaDriverVersion_v2() == 12040
        assert N.nvmlDeviceGetCount() == 8
        h = N.nvmlDeviceGetHandleByIndex(0)
        assert N.nvmlDeviceGetName(h) == "NVIDIA H100 80GB HBM3"
        assert N.nvmlDeviceGetUUID(h) == kv["device.0.uuid"] and N.nvmlDeviceGetUUID(h).startswith("GPU-")
        assert N.nvmlDeviceGetSerial(h) == kv["device.0.serial"]
        assert N.nvmlDeviceGetIndex(h) == 0 and N.nvmlDeviceGetMinorNumber(h) == 0
        pci = N.nvmlDeviceGetPciInfo_v3(h)
        assert pci.busId == "00000000:1B:00.0" and pci.pciDeviceId == 0x233010DE and pci.bus == 0x1B
        assert N.nvmlDeviceGetPciInfo(h).busId == "00000000:1B:00.0"
        m = N.nvmlDeviceGetMemoryInfo(h, version=N.nvmlMemory_v2)
        assert m.total == 81559 << 20 and m.reserved == 480 << 20  # qx-h100.xml: reserved 480 MiB
        m1 = N.nvmlDeviceGetMemoryInfo(h)
        assert m1.total == 81559 << 20
        assert N.nvmlDeviceGetBAR1MemoryInfo(h).bar1Total == 128 << 30
        assert N.nvmlDeviceGetTemperature(h, N.NVML_TEMPERATURE_GPU) == 34
        assert N.nvmlDeviceGetTemperatureThreshold(h, N.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN) == 92
        assert N.nvmlDeviceGetPowerUsage(h) == 71000
        assert N.nvmlDeviceGetEnforcedPowerLimit(h) == 700000
        assert N.nvmlDeviceGetPowerManagementLimitConstraints(h) == [200000, 700000]
        assert N.nvmlDeviceGetTotalEnergyConsumption(h) == 600000
        u = N.nvmlDeviceGetUtilizationRates(h); assert (u.gpu, u.memory) == (0, 0)
        assert N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_SM) == 345
        assert N.nvmlDeviceGetMaxClockInfo(h, N.NVML_CLOCK_GRAPHICS) == 1980
        assert N.nvmlDeviceGetPerformanceState(h) == 0
        assert N.nvmlDeviceGetCudaComputeCapability(h) == (9, 0)
        assert N.nvmlDeviceGetArchitecture(h) == N.NVML_DEVICE_ARCH_HOPPER
        assert N.nvmlDeviceGetBrand(h) == N.NVML_BRAND_NVIDIA
        assert N.nvmlDeviceGetEccMode(h) == [1, 1]
        assert N.nvmlDeviceGetTotalEccErrors(h, N.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, N.NVML_VOLATILE_ECC) == 0
        assert N.nvmlDeviceGetMigMode(h) == [0, 0]
        assert N.nvmlDeviceGetPersistenceMode(h) == 1
        assert N.nvmlDeviceGetComputeMode(h) == 0
        assert N.nvmlDeviceGetCurrPcieLinkGeneration(h) == 5 and N.nvmlDeviceGetCurrPcieLinkWidth(h) == 16
        assert N.nvmlDeviceGetNvLinkState(h, 0) == 1 and N.nvmlDeviceGetNvLinkVersion(h, 0) == 4
        try:  # x86 board: the GPU is not a NUMA node of its own (topo -m "GPU NUMA ID" N/A)
            N.nvmlDeviceGetNumaNodeId(h); raise SystemExit("GPU NUMA id must be N/A on x86")
        except N.NVMLError_NotSupported:
            pass
        assert N.nvmlDeviceGetRemappedRows(h) == (0, 0, 0, 0)
        # (fabric info is not checked here: nvidia-ml-py 12.550.89 declares clusterUuid as 80 bytes)
        ps = N.nvmlDeviceGetComputeRunningProcesses(h)
        assert [(p.pid, p.usedGpuMemory) for p in ps] == [(999, 1 << 30)]
        assert N.nvmlDeviceGetGraphicsRunningProcesses(h) == []
        assert N.nvmlSystemGetProcessName(999) == "trainer"
        try:
            N.nvmlDeviceGetFanSpeed(h); raise SystemExit("fan speed must be N/A on SXM")
        except N.NVMLError_NotSupported:
            pass
        h2 = N.nvmlDeviceGetHandleByUUID(kv["device.5.uuid"])
        assert N.nvmlDeviceGetIndex(h2) == 5
        h3 = N.nvmlDeviceGetHandleByPciBusId("0000:c3:00.0")
        assert N.nvmlDeviceGetIndex(h3) == 5
        assert N.nvmlDeviceGetTopologyCommonAncestor(h, h2) == N.NVML_TOPOLOGY_SYSTEM
        N.nvmlShutdown()
    """)


def test_state_change_seen_by_running_process(lib_dir, state_file):
    st = state_file("t4")
    p = run(lib_dir, st, f"""
        N.nvmlInit(); h = N.nvmlDeviceGetHandleByIndex(1)
        assert N.nvmlDeviceGetTemperature(h, 0) == 30
        write_state({str(st)!r}, make_state("t4", overrides={{"device.1.temperature.gpu": 81,
                                                                "device.1.utilization.gpu": 97}}))
        t0 = time.monotonic()
        while N.nvmlDeviceGetTemperature(h, 0) != 81:
            assert time.monotonic() - t0 < 0.5
        print(f"{{(time.monotonic() - t0) * 1000:.1f}} ms")
        assert N.nvmlDeviceGetUtilizationRates(h).gpu == 97
    """)
    assert "ms" in p.stdout


def test_xid_events(lib_dir, state_file):
    st = state_file("h100")
    run(lib_dir, st, f"""
        N.nvmlInit()
        s = N.nvmlEventSetCreate()
        for i in range(N.nvmlDeviceGetCount()):
            N.nvmlDeviceRegisterEvents(N.nvmlDeviceGetHandleByIndex(i), N.nvmlEventTypeXidCriticalError, s)
        write_state({str(st)!r}, make_state("h100", events=[(5, 2, 79)]))
        e = N.nvmlEventSetWait(s, 2000)
        assert e.eventData == 79 and e.eventType == N.nvmlEventTypeXidCriticalError
        assert N.nvmlDeviceGetIndex(e.device) == 2
        try:
            N.nvmlEventSetWait(s, 10); raise SystemExit("delivered twice")
        except N.NVMLError_Timeout:
            pass
        N.nvmlEventSetFree(s)
    """)


def test_lost_gpu(lib_dir, state_file):
    st = state_file("h100", overrides={"device.6.lost": 1})
    run(lib_dir, st, """
        N.nvmlInit()
        try:
            N.nvmlDeviceGetHandleByIndex(6); raise SystemExit("expected GPU_IS_LOST")
        except N.NVMLError_GpuIsLost:
            pass
        assert N.nvmlDeviceGetName(N.nvmlDeviceGetHandleByIndex(7)).startswith("NVIDIA")
    """)


def test_a_gpu_lost_after_attach_keeps_its_identity(lib_dir, state_file):
    """A process that attached the GPU before it fell off the bus keeps its handle, and the driver answers what
    it read at attach: on a real node the device plugin's GetPreferredAllocation gets the lost GPU's handle by
    index, its name, UUID, PCI info and common ancestor, and fails only at nvmlDeviceGetNvLinkState with
    GPU_IS_LOST (NVIDIA/k8s-device-plugin#2038, pytorch/ci-infra#1057); its health check reads the Xid 79
    event's UUID and marks only that GPU unhealthy. A process that starts afterwards gets no handle."""
    st = state_file("h100")
    run(lib_dir, st, f"""
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(6)
        before = (N.nvmlDeviceGetName(h), N.nvmlDeviceGetUUID(h), N.nvmlDeviceGetPciInfo_v3(h).busId)
        s = N.nvmlEventSetCreate()
        N.nvmlDeviceRegisterEvents(h, N.nvmlEventTypeXidCriticalError, s)
        write_state({str(st)!r}, make_state("h100", overrides={{"device.6.lost": 1}}, events=[(5, 6, 79)]))
        e = N.nvmlEventSetWait(s, 2000)
        assert e.eventData == 79 and N.nvmlDeviceGetUUID(e.device) == before[1]
        try:
            N.nvmlDeviceGetTemperature(h, N.NVML_TEMPERATURE_GPU); raise SystemExit("expected GPU_IS_LOST")
        except N.NVMLError_GpuIsLost:
            pass
        try:
            N.nvmlDeviceGetNvLinkState(h, 0); raise SystemExit("expected GPU_IS_LOST")
        except N.NVMLError_GpuIsLost:
            pass
        again = N.nvmlDeviceGetHandleByIndex(6)
        assert (N.nvmlDeviceGetName(again), N.nvmlDeviceGetUUID(again), N.nvmlDeviceGetPciInfo_v3(again).busId,
                N.nvmlDeviceGetPciInfo(again).busId) == (*before, before[2]), before
        peer = N.nvmlDeviceGetHandleByIndex(7)
        assert N.nvmlDeviceGetTopologyCommonAncestor(again, peer) == N.nvmlDeviceGetTopologyCommonAncestor(
            N.nvmlDeviceGetHandleByIndex(5), peer)
        N.nvmlShutdown()
        N.nvmlInit()  # attached again: the lost GPU is not
        try:
            N.nvmlDeviceGetHandleByIndex(6); raise SystemExit("expected GPU_IS_LOST")
        except N.NVMLError_GpuIsLost:
            pass
    """)


def test_supported_pstates_through_pynvml(lib_dir, state_file):
    """pynvml passes a 16-entry array and its size in bytes (nvml.h); writing 64 entries corrupted its heap."""
    run(lib_dir, state_file("h100"), """
        import gc
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        for _ in range(50):
            assert N.nvmlDeviceGetSupportedPerformanceStates(h) == [N.NVML_PSTATE_0]
        gc.collect()
    """)


def test_gpm_as_a_profiler_reads_it(lib_dir, state_file):
    st = state_file("h100", overrides={"device.0.utilization.gpu": 60, "device.0.gpm.pcie_rx_mib_per_sec": 512})
    run(lib_dir, st, """
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        assert N.nvmlGpmQueryDeviceSupport(h).isSupportedDevice == 1
        a, b = N.nvmlGpmSampleAlloc(), N.nvmlGpmSampleAlloc()
        N.nvmlGpmSampleGet(h, a); time.sleep(0.2); N.nvmlGpmSampleGet(h, b)
        g = N.c_nvmlGpmMetricsGet_t()
        g.version, g.numMetrics, g.sample1, g.sample2 = N.NVML_GPM_METRICS_GET_VERSION, 2, a, b
        g.metrics[0].metricId, g.metrics[1].metricId = N.NVML_GPM_METRIC_SM_UTIL, N.NVML_GPM_METRIC_PCIE_RX_PER_SEC
        N.nvmlGpmMetricsGet(g)
        assert [(m.nvmlReturn, round(m.value, 6)) for m in g.metrics[:2]] == [(0, 60.0), (0, 512.0)]
        N.nvmlGpmSampleFree(a); N.nvmlGpmSampleFree(b)
        N.nvmlShutdown()
    """)
