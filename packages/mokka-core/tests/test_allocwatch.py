"""The allocation watcher against a real gRPC pod-resources server speaking the kubelet's proto."""

from __future__ import annotations

import importlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from mokka_core.cluster.allocwatch import MIB, PID_BASE, AllocationWatcher, WatchSettings, match_gpu, process_ids
from mokka_core.cluster.podresources import Claim
from mokka_core.cluster.testing import FakeKubelet
from mokka_core.model.node import Node
from mokka_core.model.physics import readings
from mokka_core.model.resolve import resolve
from mokka_core.model.spec import NodeSpec
from mokka_core.stage import nodefile
from mokka_core.stage.store import OVERRIDE_FILE
from mokka_core.testing import consumers
from mokka_core.testing.waiting import wait_for

GIB = 1 << 30


@pytest.fixture(autouse=True)
def cluster_extra() -> None:
    for module in ("grpc", "google.protobuf"):
        try:
            importlib.import_module(module)
        except ImportError:
            consumers.missing(f"{module} not installed (pip install 'mokka-core[cluster]')")


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory with a short path: unix socket paths are limited to 107 bytes."""
    path = Path(tempfile.mkdtemp(prefix="mk-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    nodefile.save(root, NodeSpec(profile="h100", gpus=4))
    return root


@pytest.fixture
def kubelet(short_dir: Path) -> Iterator[FakeKubelet]:
    with FakeKubelet(short_dir / "kubelet.sock") as server:
        yield server


def node_of(root: Path) -> Node:
    inputs = nodefile.load(root).inputs()
    return resolve(inputs)


def watcher(root: Path, kubelet: FakeKubelet, **settings: object) -> AllocationWatcher:
    return AllocationWatcher(WatchSettings(root=root, socket=kubelet.socket, **settings),
                             surfaces={})


def test_allocations_become_memory_use_and_processes(root: Path, kubelet: FakeKubelet) -> None:
    node = node_of(root)
    kubelet.allocate("ml", "train-0", "trainer", node.gpus[1].uuid)
    kubelet.allocate("ml", "train-1", "trainer", node.gpus[1].uuid.upper(), "3")
    w = watcher(root, kubelet)
    assert w.poll() is True
    after = node_of(root)
    memory = after.gpus[1].config.memory
    assert memory is not None
    aperture = memory.total_bytes - memory.reserved_bytes - memory.used_bytes
    used = readings(after.gpus[1].config).memory_used_bytes  # what NVML reports: processes included
    assert used is not None and 0 <= memory.used_bytes + min(aperture, int(aperture * 0.5) * 2) - used < 2 * MIB
    assert memory == node.gpus[1].config.memory  # the profile's own values are left alone
    procs = after.gpus[1].config.processes or []
    assert sorted(p.name for p in procs) == ["ml/train-0/trainer", "ml/train-1/trainer"]
    assert [p.pid for p in procs] == sorted(p.pid for p in procs)
    assert all(PID_BASE <= p.pid < 2**22 and p.type == "C" for p in procs)
    # the same container keeps its pid on every GPU it holds, and across restarts of the watcher
    gpu3 = after.gpus[3].config.processes or []
    assert [p.pid for p in gpu3] == [p.pid for p in procs if p.name == "ml/train-1/trainer"]
    assert not after.gpus[0].config.processes and after.gpus[0].config.memory == node.gpus[0].config.memory
    assert watcher(root, kubelet).poll() is False  # level-triggered: nothing to change, nothing written


def test_dra_claims_are_holders_like_device_plugin_allocations(root: Path, kubelet: FakeKubelet) -> None:
    """A container holding GPUs through ResourceClaims of the NVIDIA DRA driver (the kubelet's dynamic_resources,
    device names gpu-<index>) shows as their process; another driver's devices (a NIC) are not GPUs."""
    kubelet.allocate_claim("ml", "infer-0", "server", "infer-0-gpu", "gpu-2")
    kubelet.allocate_claim("ml", "infer-0", "server", "infer-0-nic", "nic-0", driver="dra.net")
    kubelet.allocate("ml", "train-0", "trainer", "2")
    assert watcher(root, kubelet).poll() is True
    after = node_of(root)
    assert sorted(p.name for p in after.gpus[2].config.processes or []) == ["ml/infer-0/server", "ml/train-0/trainer"]
    assert not any(gpu.config.processes for gpu in after.gpus if gpu.index != 2)
    kubelet.release("ml", "infer-0")
    assert watcher(root, kubelet).poll() is True
    assert [p.name for p in node_of(root).gpus[2].config.processes or []] == ["ml/train-0/trainer"]


def test_release_restores_idle_values_and_keeps_other_processes(root: Path, kubelet: FakeKubelet) -> None:
    node = node_of(root)
    path = root / OVERRIDE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("version: 1\ndevices:\n  '0':\n    processes: [{pid: 42, name: sshd-test}]\n")
    kubelet.allocate("default", "p", "c", node.gpus[0].uuid)
    w = watcher(root, kubelet)
    assert w.poll()
    assert next(p.pid for p in node_of(root).gpus[0].config.processes or []) == 42
    assert len(node_of(root).gpus[0].config.processes or []) == 2
    kubelet.release("default", "p")
    assert w.poll()
    after = node_of(root)
    assert [(p.pid, p.name) for p in after.gpus[0].config.processes or []] == [(42, "sshd-test")]
    assert after.gpus[0].config.memory == node.gpus[0].config.memory
    assert yaml.safe_load(path.read_text()) == {"version": 1, "devices": {"0": {"processes": [
        {"pid": 42, "name": "sshd-test"}]}}}


def test_kubelet_going_away_keeps_the_last_reading_and_reconnects(root: Path, kubelet: FakeKubelet) -> None:
    node = node_of(root)
    kubelet.allocate("ns", "a", "c", node.gpus[2].uuid)
    w = watcher(root, kubelet, interval=0.05, timeout=1.0)
    stop = threading.Event()
    thread = threading.Thread(target=w.run, args=(stop,))
    thread.start()
    try:
        wait_for(lambda: bool(node_of(root).gpus[2].config.processes))
        published = (root / OVERRIDE_FILE).read_text()
        kubelet.stop()
        wait_for(lambda: w.kubelet_up is False)
        time.sleep(0.3)  # several failed polls
        assert (root / OVERRIDE_FILE).read_text() == published  # nothing cleared
        kubelet.release("ns", "a")
        kubelet.allocate("ns", "b", "c", "0")
        kubelet.start()
        wait_for(lambda: bool(node_of(root).gpus[0].config.processes))
        after = node_of(root)
        assert not after.gpus[2].config.processes
        assert [p.name for p in after.gpus[0].config.processes or []] == ["ns/b/c"]
        assert w.kubelet_up is True
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()


def test_unknown_device_ids_are_ignored_and_bad_override_is_not_clobbered(root: Path, kubelet: FakeKubelet) -> None:
    kubelet.allocate("ns", "a", "c", "GPU-00000000-0000-0000-0000-000000000000", "17")
    assert watcher(root, kubelet).poll() is False
    path = root / OVERRIDE_FILE
    path.write_text("devices: [not, a, mapping\n")
    kubelet.allocate("ns", "a", "c", "0")
    assert watcher(root, kubelet).poll() is False
    assert path.read_text() == "devices: [not, a, mapping\n"


def test_pids_are_stable_and_distinct() -> None:
    keys = [("ns", f"pod-{i}", "c") for i in range(2000)]
    pids = process_ids(keys)
    assert len(set(pids.values())) == len(keys)
    assert process_ids(list(reversed(keys))) == pids
    assert process_ids(keys[:1])[keys[0]] == pids[keys[0]]


def test_device_ids_match_uuids_and_indices(root: Path) -> None:
    node = node_of(root)
    gpu = node.gpus[2]
    for device_id in (gpu.uuid, gpu.uuid.upper(), gpu.uuid.removeprefix("GPU-"), "2", " 2 "):
        found = match_gpu(device_id, node)
        assert found is not None and found.index == 2, device_id
    assert match_gpu("gpu-2", node) is gpu  # a DRA device name (the NVIDIA DRA driver's gpu-<index>)
    assert match_gpu("4", node) is None and match_gpu("MIG-1", node) is None and match_gpu("gpu-4", node) is None
    assert Claim("a", "b", "c", "d") < Claim("a", "b", "c", "e")


def test_settings_refuse_bad_values(root: Path) -> None:
    with pytest.raises(ValueError, match="used_fraction"):
        WatchSettings(root=root, used_fraction=0)
    with pytest.raises(ValueError, match="interval"):
        WatchSettings(root=root, interval=0)


def test_command_publishes_and_stops_cleanly_on_sigterm(root: Path, kubelet: FakeKubelet) -> None:
    node = node_of(root)
    kubelet.allocate("ns", "a", "c", node.gpus[0].uuid)
    code = "import sys; from mokka_core.cluster.cli import allocwatch_main; sys.exit(allocwatch_main())"
    env = {**os.environ, "MOKKA_PODRESOURCES_SOCKET": str(kubelet.socket)}
    proc = subprocess.Popen([sys.executable, "-c", code, "--root", str(root), "--interval", "0.2"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: bool(node_of(root).gpus[0].config.processes), timeout=30)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=15)
    finally:
        proc.kill()
    assert proc.returncode == 0, out
    assert "published: gpu 0: 1 container(s)" in out and "SIGTERM received" in out and "stopped" in out


def test_nvidia_smi_lists_the_allocated_containers(root: Path, kubelet: FakeKubelet, tmp_path: Path) -> None:
    from mokka_core.stage.native import native_dir
    from mokka_core.stage.nvml_view import write_nvml_state

    smi = consumers.require("nvidia-smi", version="550")
    library = native_dir()
    if library is None or not (library / "libnvidia-ml.so.1").exists():
        consumers.missing("mock libnvidia-ml not built (make -C native install)")
    node = node_of(root)
    kubelet.allocate("ml", "job", "worker", node.gpus[1].uuid)
    assert watcher(root, kubelet).poll()
    state = write_nvml_state(node_of(root), tmp_path / "mokka-nvml.state")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOKKA_NVML")}
    env.update(LD_LIBRARY_PATH=str(library), MOKKA_NVML_STATE=str(state))
    p = subprocess.run([str(smi), "-q", "-x"], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    gpus = ET.fromstring(p.stdout).findall("gpu")
    procs = [[(i.findtext("pid"), i.findtext("process_name")) for i in g.findall("processes/process_info")]
             for g in gpus]
    pid = str((node_of(root).gpus[1].config.processes or [])[0].pid)
    assert procs[1] == [(pid, "ml/job/worker")] and procs[0] == procs[2] == procs[3] == []
    used = readings(node_of(root).gpus[1].config).memory_used_bytes
    assert used is not None
    mib = {used >> 20, -(-used >> 20)}  # 535 truncates, 550 rounds up
    assert gpus[1].findtext("fb_memory_usage/used") in {f"{m} MiB" for m in mib}


def test_descriptor_set_matches_the_protos(tmp_path: Path) -> None:
    from google.protobuf import descriptor_pb2

    from mokka_core.cluster.protos import DESCRIPTOR_SET, compile_descriptor_set

    try:
        importlib.import_module("grpc_tools")
    except ImportError:
        consumers.missing("grpcio-tools not installed (test extra)")
    fresh = tmp_path / "fresh.binpb"
    compile_descriptor_set(fresh)
    parse = descriptor_pb2.FileDescriptorSet.FromString
    assert parse(fresh.read_bytes()) == parse(DESCRIPTOR_SET.read_bytes()), \
        "descriptors.binpb is stale: python -m mokka_core.cluster.protos"


def test_mokka_core_works_without_the_cluster_extra() -> None:
    code = """
import sys
sys.modules["grpc"] = None
import mokka_core.cli.mokka, mokka_core.cluster.allocwatch
from mokka_core.cluster.cli import allocwatch_main
try:
    allocwatch_main(["--once"])
except ImportError as exc:
    print(exc)
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "mokka-core[cluster]" in p.stdout


def test_the_node_daemon_renders_what_the_watcher_writes(tmp_path: Path, kubelet: FakeKubelet) -> None:
    """Default mode: the watcher only writes the override file; ``mokka node`` sees it and re-renders."""
    import json

    from mokka_core.node.settings import NodeSettings
    from mokka_core.testing.runner import PROBE_FILE, DaemonRunner, ProbeSurface

    root = tmp_path / "root"
    settings = NodeSettings(root=root, spec=NodeSpec(profile="h100", gpus=2), supervise=False)
    with DaemonRunner(settings, surfaces={"probe": ProbeSurface()}):
        before = json.loads((root / PROBE_FILE).read_text())["gpus"]["1"]["memory"]
        kubelet.allocate("ns", "a", "c", "1")
        w = AllocationWatcher(WatchSettings(root=root, socket=kubelet.socket))
        assert w.surfaces == {} and w.poll()
        wait_for(lambda: json.loads((root / PROBE_FILE).read_text())["gpus"]["1"]["memory"] != before)
        memory = json.loads((root / PROBE_FILE).read_text())["gpus"]["1"]["memory"]
        assert memory["used"] > 0 and memory["used"] + memory["free"] <= memory["total"]


def test_render_mode_restages_itself(root: Path, kubelet: FakeKubelet) -> None:
    import json

    from mokka_core.testing.runner import PROBE_FILE, ProbeSurface

    kubelet.allocate("ns", "a", "c", "0")
    w = AllocationWatcher(WatchSettings(root=root, socket=kubelet.socket, render=True),
                          surfaces={"probe": ProbeSurface()})
    assert w.poll()
    assert json.loads((root / PROBE_FILE).read_text())["gpus"]["0"]["memory"]["used"] > 0


PYNVML_PROCESSES = """
import json, pynvml
pynvml.nvmlInit()
out = []
for i in range(pynvml.nvmlDeviceGetCount()):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
    out.append({"used": pynvml.nvmlDeviceGetMemoryInfo(h).used,
                "procs": [[p.pid, p.usedGpuMemory, pynvml.nvmlSystemGetProcessName(p.pid)] for p in procs]})
print(json.dumps(out))
"""


def test_pynvml_sees_the_allocated_containers(root: Path, kubelet: FakeKubelet, tmp_path: Path) -> None:
    import json

    from mokka_core.stage.native import native_dir
    from mokka_core.stage.nvml_view import write_nvml_state

    consumers.pynvml()
    library = native_dir()
    if library is None or not (library / "libnvidia-ml.so.1").exists():
        consumers.missing("mock libnvidia-ml not built (make -C native install)")
    kubelet.allocate("ml", "a", "main", "2")
    kubelet.allocate("ml", "b", "main", "2")
    assert watcher(root, kubelet).poll()
    node = node_of(root)
    state = write_nvml_state(node, tmp_path / "mokka-nvml.state")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOKKA_NVML")}
    env.update(LD_LIBRARY_PATH=str(library), MOKKA_NVML_STATE=str(state))
    p = subprocess.run([sys.executable, "-c", PYNVML_PROCESSES], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    gpus = json.loads(p.stdout)
    memory = node.gpus[2].config.memory
    used = readings(node.gpus[2].config).memory_used_bytes
    assert memory is not None and used is not None
    assert gpus[2]["used"] == used + memory.reserved_bytes  # NVML's v1 "used" counts reserved
    expected = [[proc.pid, proc.used_memory_mib << 20, proc.name] for proc in node.gpus[2].config.processes or []]
    assert gpus[2]["procs"] == expected and len(expected) == 2
    assert all(g["procs"] == [] for i, g in enumerate(gpus) if i != 2)
    kubelet.release("ml", "a")
    kubelet.release("ml", "b")
    assert watcher(root, kubelet).poll()
    write_nvml_state(node_of(root), state)
    p = subprocess.run([sys.executable, "-c", PYNVML_PROCESSES], env=env, capture_output=True, text=True, timeout=60)
    assert json.loads(p.stdout)[2]["procs"] == []


def test_watcher_started_before_the_node_publishes_once_it_is_staged(tmp_path: Path, kubelet: FakeKubelet,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "root"
    kubelet.allocate("ns", "a", "c", "0")
    w = watcher(root, kubelet)
    assert w.poll() is False and w.poll() is False
    assert sum("not readable" in r.message for r in caplog.records) == 1  # said once, not every poll
    nodefile.save(root, NodeSpec(profile="h100", gpus=1))
    assert w.poll() is True
    assert node_of(root).gpus[0].config.processes
