"""A long-running pynvml process sees every nvml-mock-ctl change, in time and never torn (real library)."""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from mokka_core.ctl.cli import execute
from mokka_core.model.spec import NodeSpec
from mokka_core.node.settings import NodeSettings
from mokka_core.stage.native import native_dir
from mokka_core.stage.paths import LIB_DIR
from mokka_core.testing.runner import DaemonRunner, nvml_surface

pytest.importorskip("pynvml")
pytest.importorskip("mokka_core.stage.nvml_view")
if native_dir() is None:
    pytest.skip("mock libnvidia-ml not built (make -C native install)", allow_module_level=True)

pytestmark = pytest.mark.e2e
STEP = 2**29
CHANGES = 100

READER = textwrap.dedent("""
    import sys, time, pynvml
    step, final = int(sys.argv[1]), int(sys.argv[2])
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    offset, last, last_used = None, None, 0
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        temp = pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
        gap = memory.total - memory.used - memory.free
        offset = gap if offset is None else offset
        if gap != offset:
            print(f"TORN used+free changed: {memory.used} {memory.free} {memory.total}", flush=True)
        # two calls may straddle a change, so across calls only the order is checked: never backwards
        if last is not None and temp < last or memory.used < last_used:
            print(f"TORN went back: {temp} C after {last} C, used {memory.used} after {last_used}", flush=True)
        last_used = memory.used
        if temp != last:
            print(f"T {temp}", flush=True)
            last = temp
        if temp == final:
            break
    pynvml.nvmlShutdown()
""")


def test_pynvml_sees_100_ctl_changes_each_promptly_and_never_torn(tmp_path: Path) -> None:
    root = tmp_path / "root"
    surfaces = {"gpu": nvml_surface()}
    settings = NodeSettings(root=root, spec=NodeSpec(profile="h100", gpus=2), supervise=False)
    with DaemonRunner(settings, surfaces):
        assert execute(["--root", str(root), "set", "0", "thermal.temperature_gpu_c=20"], surfaces=surfaces) == 0
        env = {**os.environ, "LD_LIBRARY_PATH": str(root / LIB_DIR)}
        reader = subprocess.Popen([sys.executable, "-c", READER, str(STEP), str(20 + CHANGES)], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines = selectors.DefaultSelector()
        lines.register(reader.stdout, selectors.EVENT_READ)

        def seen_temperature(value: int, timeout: float) -> float:
            started = time.monotonic()
            while time.monotonic() - started < timeout:
                if lines.select(timeout=0.05):
                    line = reader.stdout.readline().strip()
                    assert not line.startswith("TORN"), line
                    if line == f"T {value}":
                        return time.monotonic() - started
                    if not line and reader.poll() is not None:
                        raise AssertionError(f"reader exited: {reader.stderr.read()}")
            raise AssertionError(f"pynvml did not see {value} C within {timeout} s")

        try:
            seen_temperature(20, 30)
            delays = []
            for n in range(1, CHANGES + 1):
                assert execute(["--root", str(root), "set", "0", f"thermal.temperature_gpu_c={20 + n}",
                                f"memory.used_bytes={n * STEP}"], surfaces=surfaces) == 0
                delays.append(seen_temperature(20 + n, 5))
            reader.wait(30)
        finally:
            reader.kill()
            reader.wait()
            lines.close()
            reader.stdout.close()
            reader.stderr.close()
    assert reader.returncode == 0 or reader.returncode == -9
    delays.sort()
    print(f"pynvml saw each change {delays[len(delays) // 2] * 1000:.1f} ms (median), "
          f"{delays[-1] * 1000:.1f} ms (max) after nvml-mock-ctl returned")  # the target is bench_api's


WAITER = textwrap.dedent("""
    import sys, pynvml
    pynvml.nvmlInit()
    events = pynvml.nvmlEventSetCreate()
    for index in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        pynvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError, events)
    print("waiting", flush=True)
    data = pynvml.nvmlEventSetWait(events, 20000)
    print(f"xid {data.eventData}", flush=True)
    for index in range(4):
        try:
            pynvml.nvmlDeviceGetTemperature(pynvml.nvmlDeviceGetHandleByIndex(index), pynvml.NVML_TEMPERATURE_GPU)
            print(f"gpu {index} ok", flush=True)
        except pynvml.NVMLError as exc:
            print(f"gpu {index} {exc.value}", flush=True)
""")


def test_fallen_off_bus_reaches_nvml_pci_and_the_event_waiter_alike(tmp_path: Path) -> None:
    root = tmp_path / "root"
    surfaces = {"gpu": nvml_surface()}
    pci = None
    try:
        from mokka_sim_pci.surface import PciSurface

        surfaces["pci"] = pci = PciSurface()
    except ImportError:
        pass
    settings = NodeSettings(root=root, spec=NodeSpec(profile="h100", gpus=4), supervise=False)
    with DaemonRunner(settings, surfaces):
        env = {**os.environ, "LD_LIBRARY_PATH": str(root / LIB_DIR)}
        waiter = subprocess.Popen([sys.executable, "-c", WAITER], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        try:
            assert waiter.stdout.readline().strip() == "waiting"
            assert execute(["--root", str(root), "fail", "3", "fallen-off-bus"], surfaces=surfaces) == 0
            out, err = waiter.communicate(timeout=30)
        finally:
            waiter.kill()
            waiter.wait()
            waiter.stdout.close()
            waiter.stderr.close()
        assert "xid 79" in out, (out, err)
        assert "gpu 0 ok" in out and "gpu 2 ok" in out
        assert f"gpu 3 {15}" in out  # NVML_ERROR_GPU_IS_LOST
        if pci is not None:
            from mokka_core.model.resolve import resolve
            from mokka_core.stage import nodefile

            inputs = nodefile.load(root).inputs()
            bus_id = resolve(inputs).gpus[3].bus_id
            config = (root / "sys/bus/pci/devices" / bus_id / "config").read_bytes()
            assert set(config[:64]) == {0xFF}
            healthy = (root / "sys/bus/pci/devices" / resolve(inputs).gpus[2].bus_id
                       / "config").read_bytes()
            assert healthy[:2] == b"\xde\x10"  # NVIDIA's vendor id, little-endian


INIT = textwrap.dedent("""
    import pynvml
    try:
        pynvml.nvmlInit()
        print("count", pynvml.nvmlDeviceGetCount())
    except pynvml.NVMLError as exc:
        print("error", exc.value)
""")


def test_failing_and_healing_the_gpu_surface_is_what_nvml_init_reports(tmp_path: Path) -> None:
    root = tmp_path / "root"
    surfaces = {"gpu": nvml_surface()}
    settings = NodeSettings(root=root, spec=NodeSpec(profile="h100", gpus=2), supervise=False)
    env = {**os.environ, "LD_LIBRARY_PATH": str(root / LIB_DIR)}

    def init() -> str:
        return subprocess.run([sys.executable, "-c", INIT], env=env, capture_output=True, text=True,
                              timeout=60).stdout.strip()

    with DaemonRunner(settings, surfaces):
        assert init() == "count 2"
        assert execute(["--root", str(root), "fail-surface", "gpu"], surfaces=surfaces) == 0
        assert init() == "error 9"  # NVML_ERROR_DRIVER_NOT_LOADED
        assert execute(["--root", str(root), "heal", "gpu"], surfaces=surfaces) == 0
        assert init() == "count 2"
