"""End to end: a container that never asked for a GPU, adjusted by the NRI plugin, runs the real nvidia-smi.

The test runtime asks the plugin for its adjustment; the test applies it to an
OCI bundle the way the runtime does (mounts, env, devices) and runs it under
runc.  The node's GPU 1 is allocated to a pod in the test kubelet, so the
allocation watcher's process shows up in the container's nvidia-smi too.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import stat
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mokka_core.model.resolve import resolve
from mokka_core.model.spec import NodeSpec
from mokka_core.stage import nodefile
from mokka_core.stage.native import native_dir
from mokka_core.stage.nvml_view import write_nvml_state
from mokka_core.stage.paths import LIB_DIR, NVML_STATE_FILE
from mokka_core.testing import consumers

pytestmark = [pytest.mark.root, pytest.mark.consumer]


@pytest.fixture(scope="module")
def runc() -> Path:
    for module in ("grpc", "google.protobuf"):
        try:
            importlib.import_module(module)
        except ImportError:
            consumers.missing(f"{module} not installed (pip install 'mokka-core[cluster]')")
    if os.geteuid() != 0:
        consumers.missing("runc containers need root here")
    consumers.ensure_apt(["runc", "busybox-static"], bool(shutil.which("runc")) and Path("/bin/busybox").exists())
    found = shutil.which("runc")
    if not found:
        consumers.missing("runc not found after installing it")
    return Path(found)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="mk-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def stage_node(root: Path, gpus: int) -> None:
    """What the gpu surface stages, by hand (mokka-core's tests cannot depend on sim-gpu)."""
    library = native_dir()
    if library is None or not (library / "libnvidia-ml.so.1").exists():
        consumers.missing("mock libnvidia-ml not built (make -C native install)")
    real = (library / "libnvidia-ml.so.1").resolve()
    (root / LIB_DIR).mkdir(parents=True)
    shutil.copy(real, root / LIB_DIR / real.name)
    (root / LIB_DIR / "libnvidia-ml.so.1").symlink_to(real.name)
    (root / "dev").mkdir()
    for name, minor in [*((f"nvidia{i}", i) for i in range(gpus)), ("nvidiactl", 255)]:
        os.mknod(root / "dev" / name, stat.S_IFCHR | 0o666, os.makedev(195, minor))
        os.chmod(root / "dev" / name, 0o666)
    nodefile.save(root, NodeSpec(profile="h100", gpus=gpus))


def render_state(root: Path) -> None:
    inputs = nodefile.load(root).inputs()
    write_nvml_state(resolve(inputs), root / NVML_STATE_FILE)


def bundle_with(base: Path, smi: Path, script: str) -> dict[str, Any]:
    """A bundle whose rootfs holds busybox, nvidia-smi and the glibc it links; no NVIDIA library."""
    rootfs = base / "rootfs"
    (rootfs / "bin").mkdir(parents=True)
    shutil.copy("/bin/busybox", rootfs / "bin/busybox")
    for tool in ("sh", "ls", "cat", "echo"):
        (rootfs / "bin" / tool).symlink_to("busybox")
    shutil.copy(smi, rootfs / "bin/nvidia-smi")
    ldd = subprocess.run(["ldd", str(smi)], capture_output=True, text=True, check=True).stdout
    for line in ldd.splitlines():
        path = next((w for w in line.split() if w.startswith("/")), None)
        if path:
            (rootfs / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, rootfs / path.lstrip("/"))
    subprocess.run(["runc", "spec", "--bundle", str(base)], check=True, capture_output=True)
    config: dict[str, Any] = json.loads((base / "config.json").read_text())
    config["process"]["terminal"] = False
    config["process"]["args"] = ["/bin/sh", "-c", script]
    config["root"] = {"path": "rootfs", "readonly": False}
    return config


def apply_adjustment(config: dict[str, Any], adjust: Any) -> None:
    """What the runtime does with a ContainerAdjustment: mounts, env (key by key) and devices."""
    for m in adjust.mounts:
        config["mounts"].append({"destination": m.destination, "type": m.type, "source": m.source,
                                 "options": list(m.options)})
    env = dict(e.partition("=")[::2] for e in config["process"]["env"])
    env.update({kv.key: kv.value for kv in adjust.env})
    config["process"]["env"] = [f"{k}={v}" for k, v in env.items()]
    linux = config.setdefault("linux", {})
    for d in adjust.linux.devices:
        linux.setdefault("devices", []).append({"path": d.path, "type": d.type, "major": d.major, "minor": d.minor,
                                                "fileMode": d.file_mode.value, "uid": d.uid.value,
                                                "gid": d.gid.value})
        linux.setdefault("resources", {}).setdefault("devices", []).append(
            {"allow": True, "type": d.type, "major": d.major, "minor": d.minor, "access": "rwm"})


def test_injected_container_runs_nvidia_smi_and_sees_allocations(runc: Path, tmp_path: Path,
                                                                  short_dir: Path) -> None:
    from mokka_core.cluster.allocwatch import AllocationWatcher, WatchSettings
    from mokka_core.cluster.nri.inject import InjectConfig
    from mokka_core.cluster.nri.plugin import NriPlugin, PluginSettings
    from mokka_core.cluster.nri.runtime import FakeRuntime, container, pod
    from mokka_core.cluster.testing import FakeKubelet

    smi = consumers.require("nvidia-smi", version="550")
    root = tmp_path / "node"
    stage_node(root, gpus=2)
    with FakeKubelet(short_dir / "kubelet.sock") as kubelet:
        kubelet.allocate("ml", "trainer", "main", "1")
        watcher = AllocationWatcher(WatchSettings(root=root, socket=kubelet.socket), surfaces={})
        assert watcher.poll()
        watcher.client.close()
    render_state(root)

    base = tmp_path / "bundle"
    script = ("nvidia-smi -L; nvidia-smi --query-compute-apps=gpu_uuid,pid,name --format=csv,noheader; "
              "ls -l /dev/nvidia0 /dev/nvidiactl; echo LD_LIBRARY_PATH=$LD_LIBRARY_PATH")
    config = bundle_with(base, smi, script)
    plugin = NriPlugin(PluginSettings(inject=InjectConfig(root=root), socket=short_dir / "nri.sock", health_addr=""))
    stop = threading.Event()
    thread = threading.Thread(target=plugin.run, args=(stop,), daemon=True)
    try:
        with FakeRuntime(short_dir / "nri.sock") as runtime:
            thread.start()
            env = list(config["process"]["env"])
            adjust = runtime.create_container(pod("web", "frontend"), container("app", env=env)).adjust
    finally:
        stop.set()
        thread.join(10)
    apply_adjustment(config, adjust)
    (base / "config.json").write_text(json.dumps(config))

    state = base / "runc-state"
    name = f"mokka-nri-{os.getpid()}"
    result = subprocess.run([str(runc), "--root", str(state), "run", "--bundle", str(base), name],
                            capture_output=True, text=True, timeout=120)
    subprocess.run([str(runc), "--root", str(state), "delete", "--force", name], capture_output=True)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    inputs = nodefile.load(root).inputs()
    node = resolve(inputs)
    assert sum(line.startswith("GPU ") for line in lines) == 2
    assert f"GPU 1: {node.gpus[1].config.name} (UUID: {node.gpus[1].uuid})" in lines
    [process] = node.gpus[1].config.processes or []
    assert f"{node.gpus[1].uuid}, {process.pid}, ml/trainer/main" in lines
    assert any(line.startswith("crw") and "195,   0" in line and line.endswith("/dev/nvidia0") for line in lines)
    assert f"LD_LIBRARY_PATH=/opt/mokka/{LIB_DIR}" in lines
