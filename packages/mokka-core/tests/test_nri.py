"""The NRI plugin against a test runtime speaking the same protocol (mux + ttrpc + NRI proto)."""

from __future__ import annotations

import importlib
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mokka_core.stage.paths import LIB_DIR
from mokka_core.testing import consumers
from mokka_core.testing.waiting import wait_for

API = "nri.pkg.api.v1alpha1"


@pytest.fixture(autouse=True)
def cluster_extra() -> None:
    try:
        importlib.import_module("google.protobuf")
    except ImportError:
        consumers.missing("protobuf not installed (pip install 'mokka-core[cluster]')")


@pytest.fixture
def short_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="mk-", dir="/tmp"))  # unix socket paths are limited to 107 bytes
    yield path
    shutil.rmtree(path, ignore_errors=True)


DEVICES = {"nvidia0": (195, 0), "nvidia1": (195, 1), "nvidiactl": (195, 255), "nvidia-uvm": (510, 0)}


@pytest.fixture
def node_root(tmp_path: Path) -> Path:
    """A staged root as the gpu surface lays it out: library dir with the state file, usr/bin, dev nodes."""
    root = tmp_path / "root"
    (root / LIB_DIR).mkdir(parents=True)
    (root / LIB_DIR / "libnvidia-ml.so.1").write_text("library\n")
    (root / LIB_DIR / "mokka-nvml.state").write_text("state\n")
    (root / "usr/bin").mkdir(parents=True)
    (root / "dev/nvidia-caps").mkdir(parents=True)
    for name, (major, minor) in DEVICES.items():
        try:
            os.mknod(root / "dev" / name, stat.S_IFCHR | 0o666, os.makedev(major, minor))
            os.chmod(root / "dev" / name, 0o666)
        except PermissionError:
            (root / "dev" / name).touch()
    return root


def char_devices_possible(root: Path) -> bool:
    return stat.S_ISCHR(os.lstat(root / "dev/nvidia0").st_mode)


@pytest.fixture
def plugin_factory(short_dir: Path, node_root: Path) -> Iterator[Callable[..., Any]]:
    from mokka_core.cluster.nri.inject import InjectConfig
    from mokka_core.cluster.nri.plugin import NriPlugin, PluginSettings

    started: list[tuple[threading.Event, threading.Thread]] = []

    def start(**inject: Any) -> NriPlugin:
        settings = PluginSettings(inject=InjectConfig(root=node_root, **inject), socket=short_dir / "nri.sock",
                                  health_addr="", reconnect_min=0.05, reconnect_max=0.2)
        plugin = NriPlugin(settings)
        stop = threading.Event()
        thread = threading.Thread(target=plugin.run, args=(stop,), daemon=True)
        thread.start()
        started.append((stop, thread))
        return plugin

    yield start
    for stop, thread in started:
        stop.set()
        thread.join(10)
        assert not thread.is_alive()


@pytest.fixture
def runtime(short_dir: Path) -> Iterator[Any]:
    from mokka_core.cluster.nri.runtime import FakeRuntime, container, pod

    existing_pod = pod("default", "already-running")
    with FakeRuntime(short_dir / "nri.sock", pods=[existing_pod], containers=[container("old")]) as rt:
        yield rt


def create(runtime: Any, namespace: str = "default", annotations: dict[str, str] | None = None,
           **container: Any) -> Any:
    from mokka_core.cluster.nri.runtime import container as make_container
    from mokka_core.cluster.nri.runtime import pod

    return runtime.create_container(pod(namespace, "p", annotations), make_container(**container)).adjust


def env_of(adjust: Any) -> dict[str, str]:
    return {kv.key: kv.value for kv in adjust.env}


def test_registers_configures_and_subscribes_to_create_container(runtime: Any, plugin_factory: Any) -> None:
    plugin = plugin_factory()
    session = runtime.wait_for_plugin()
    assert (session.name, session.index) == ("mokka", "10")
    assert session.events == 1 << 3  # CREATE_CONTAINER only
    wait_for(lambda: plugin.ready()[0])
    assert plugin.ready() == (True, "registered as 10-mokka")
    assert plugin.request_timeout == runtime.request_timeout


def test_create_container_gets_root_library_path_and_devices(runtime: Any, plugin_factory: Any,
                                                            node_root: Path) -> None:
    plugin_factory()
    adjust = create(runtime, env=["PATH=/usr/bin:/bin", "LD_LIBRARY_PATH=/app/lib", "HOME=/root"])
    [mount] = adjust.mounts
    assert (mount.destination, mount.type, mount.source) == ("/opt/mokka", "bind", str(node_root))
    assert list(mount.options) == ["rbind", "ro", "nosuid", "nodev"]
    assert env_of(adjust) == {"LD_LIBRARY_PATH": f"/opt/mokka/{LIB_DIR}:/app/lib",
                              "PATH": "/opt/mokka/usr/bin:/usr/bin:/bin"}
    devices = {d.path: (d.type, d.major, d.minor, d.file_mode.value) for d in adjust.linux.devices}
    if char_devices_possible(node_root):
        assert devices == {f"/dev/{n}": ("c", ma, mi, 0o666) for n, (ma, mi) in DEVICES.items()}
    else:
        assert devices == {}  # unprivileged staging leaves plain files: never passed as devices


def test_env_keys_that_need_no_change_are_not_sent(runtime: Any, plugin_factory: Any) -> None:
    plugin_factory()
    already = [f"LD_LIBRARY_PATH=/opt/mokka/{LIB_DIR}", "PATH=/opt/mokka/usr/bin:/bin"]
    assert env_of(create(runtime, env=already)) == {}
    assert env_of(create(runtime, env=[])) == {
        "LD_LIBRARY_PATH": f"/opt/mokka/{LIB_DIR}",
        "PATH": "/opt/mokka/usr/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}


@pytest.mark.parametrize(("namespace", "annotations", "why"), [
    ("kube-system", {}, "excluded"),
    ("kube-system", {"mokka.nvidia.com/inject": "true"}, "excluded wins over the annotation"),
    ("ml", {"mokka.nvidia.com/inject": "FALSE"}, "opt-out annotation"),
    ("other", {}, "namespace not opted in"),
])
def test_skipped_pods_get_no_adjustment(runtime: Any, plugin_factory: Any, namespace: str,
                                        annotations: dict[str, str], why: str) -> None:
    plugin = plugin_factory(namespaces=("ml", "research"))
    adjust = create(runtime, namespace, annotations)
    assert not adjust.mounts and not adjust.env and not adjust.linux.devices, why
    assert plugin.counters.skipped == 1 and plugin.counters.injected == 0


def test_opt_in_annotation_and_listed_namespaces(runtime: Any, plugin_factory: Any) -> None:
    plugin_factory(namespaces=("ml",))
    assert create(runtime, "ml").mounts
    assert create(runtime, "other", {"mokka.nvidia.com/inject": "true"}).mounts


def test_container_that_already_has_the_mount_is_left_alone(runtime: Any, plugin_factory: Any) -> None:
    plugin_factory()
    adjust = create(runtime, mounts=[{"destination": "/opt/mokka/", "source": "/elsewhere", "type": "bind"}])
    assert not adjust.mounts and not adjust.env


HOST_SYS = {"destination": "/host-sys", "source": "/sys", "type": "bind", "options": ["rbind", "rprivate", "ro"]}
CGROUPS = {"destination": "/host-sys/fs/cgroup", "source": "/sys/fs/cgroup", "type": "bind", "options": ["rbind"]}


def test_a_container_mounting_the_hosts_sysfs_gets_the_nodes(runtime: Any, plugin_factory: Any,
                                                             node_root: Path) -> None:
    """node-feature-discovery's worker reads PCI functions under /host-sys (a hostPath of /sys): in a namespace of
    sysfs_namespaces that bind is replaced by the node's staged sys, and nothing else of the driver is added."""
    (node_root / "sys/bus/pci/devices").mkdir(parents=True)
    plugin_factory(namespaces=("ml",), sysfs_namespaces=("node-feature-discovery",))
    adjust = create(runtime, "node-feature-discovery", mounts=[HOST_SYS, CGROUPS])
    assert [(m.destination, m.type, m.source, list(m.options)) for m in adjust.mounts] == [
        ("-/host-sys", "", "", []),
        ("/host-sys", "bind", str(node_root / "sys"), ["rbind", "ro", "nosuid", "nodev", "noexec"])]
    assert not adjust.env and not adjust.linux.devices


def test_the_sysfs_swap_leaves_other_containers_alone(runtime: Any, plugin_factory: Any, node_root: Path) -> None:
    (node_root / "sys").mkdir()
    plugin_factory(namespaces=("ml",), sysfs_namespaces=("node-feature-discovery",))
    assert not create(runtime, "node-feature-discovery", mounts=[CGROUPS]).mounts  # no bind of /sys itself
    assert not create(runtime, "node-feature-discovery").mounts
    assert not create(runtime, "other", mounts=[HOST_SYS]).mounts  # a namespace not listed
    injected = create(runtime, "ml", mounts=[HOST_SYS])
    assert [m.destination for m in injected.mounts] == ["/opt/mokka"]  # the driver, the host's sysfs kept
    assert not create(runtime, "node-feature-discovery", {"mokka.nvidia.com/inject": "false"},
                      mounts=[HOST_SYS]).mounts


def test_devices_left_to_the_device_plugin_or_declined(runtime: Any, plugin_factory: Any, node_root: Path) -> None:
    if not char_devices_possible(node_root):
        consumers.missing("creating device nodes needs CAP_MKNOD")
    plugin_factory()
    for kwargs in ({"devices": ["/dev/nvidia3"]}, {"cdi_devices": ["nvidia.com/gpu=0"]}):
        adjust = create(runtime, **kwargs)
        assert adjust.mounts and not adjust.linux.devices, kwargs
    assert not create(runtime, annotations={"mokka.nvidia.com/devices": "false"}).linux.devices
    assert create(runtime, cdi_devices=["vendor.com/nic=0"]).linux.devices


def test_annotated_device_mode(runtime: Any, plugin_factory: Any, node_root: Path) -> None:
    if not char_devices_possible(node_root):
        consumers.missing("creating device nodes needs CAP_MKNOD")
    plugin_factory(devices="annotated")
    assert not create(runtime).linux.devices
    assert len(create(runtime, annotations={"mokka.nvidia.com/devices": "true"}).linux.devices) == len(DEVICES)


#: an 8-GPU node whose minor numbers run against the NVML order (GPU i is /dev/nvidia<7 - i>)
GPU_UUIDS = [f"GPU-{i:08x}-0000-5000-8000-000000000000" for i in range(8)]
CONTROL = {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"}


@pytest.fixture
def eight_gpu_root(node_root: Path) -> Path:
    """``node_root`` as an 8-GPU node: its state file names each GPU's UUID and minor number."""
    if not char_devices_possible(node_root):
        consumers.missing("creating device nodes needs CAP_MKNOD")
    lines = [f"device.{i}.{key}={value}" for i in range(8)
             for key, value in (("uuid", GPU_UUIDS[i]), ("minor_number", 7 - i))]
    (node_root / LIB_DIR / "mokka-nvml.state").write_text("\n".join(["mokka-nvml-state 1", *lines, "end"]) + "\n")
    for name, (major, minor) in {**{f"nvidia{m}": (195, m) for m in range(2, 8)}, "nvidia-uvm-tools": (510, 1),
                                 "nvidia-modeset": (195, 254)}.items():
        os.mknod(node_root / "dev" / name, stat.S_IFCHR | 0o666, os.makedev(major, minor))
    return node_root


def device_names(adjust: Any) -> set[str]:
    return {d.path.removeprefix("/dev/") for d in adjust.linux.devices}


@pytest.mark.parametrize(("visible", "minors"), [
    (f"{GPU_UUIDS[4]},{GPU_UUIDS[7]}", {3, 0}),        # the device plugin's envvar strategy: UUIDs
    ("4, 7", {3, 0}),                                   # indices (spaces as the runtime trims them)
    ("2:0", {5}),                                       # a MIG device by index: its GPU
    ("none", set()),                                    # no GPU, the control devices
    ("GPU-not-on-this-node", set()),
    ("none,3", set()),
    ("3,all", set(range(8))),
    ("all", set(range(8))),
])
def test_nvidia_visible_devices_gives_the_gpus_it_names(runtime: Any, plugin_factory: Any, eight_gpu_root: Path,
                                                        visible: str, minors: set[int]) -> None:
    plugin_factory()
    adjust = create(runtime, env=[f"NVIDIA_VISIBLE_DEVICES={visible}"])
    assert adjust.mounts
    assert device_names(adjust) == CONTROL | {f"nvidia{m}" for m in minors}


@pytest.mark.parametrize("visible", ["void", "", " , ", "0,void"])
def test_nvidia_visible_devices_void_gives_no_device(runtime: Any, plugin_factory: Any, eight_gpu_root: Path,
                                                     visible: str) -> None:
    plugin_factory()
    adjust = create(runtime, env=[f"NVIDIA_VISIBLE_DEVICES={visible}"])
    assert adjust.mounts and not adjust.linux.devices


def test_nvidia_visible_devices_names_a_mig_device_by_uuid(runtime: Any, plugin_factory: Any,
                                                           eight_gpu_root: Path) -> None:
    from mokka_core.stage.mig_partition import mig_uuid
    from mokka_core.stage.paths import NVML_SETTINGS_FILE

    (eight_gpu_root / NVML_SETTINGS_FILE).write_text(
        "mokka-nvml-settings 1\ndevice.6.mig.gpu_instances=13,0,6\ndevice.6.mig.compute_instances=13,0,0,0\nend\n")
    plugin_factory()
    adjust = create(runtime, env=[f"NVIDIA_VISIBLE_DEVICES={mig_uuid(GPU_UUIDS[6], 13, 0)}"])
    assert device_names(adjust) == CONTROL | {"nvidia1"}


def test_nvidia_visible_devices_within_the_device_settings(runtime: Any, plugin_factory: Any,
                                                          eight_gpu_root: Path) -> None:
    """An annotation declining devices, or a plugin that gives none, still wins; a CDI device from NVIDIA's
    device plugin, of any of its vendors, means they were given already."""
    asked = [f"NVIDIA_VISIBLE_DEVICES={GPU_UUIDS[0]}"]
    plugin_factory(devices="annotated")
    assert device_names(create(runtime, env=asked)) == CONTROL | {"nvidia7"}  # asked for: not an injection
    assert not create(runtime, env=asked, annotations={"mokka.nvidia.com/devices": "false"}).linux.devices
    for cdi in ("k8s.device-plugin.nvidia.com/gpu=GPU-0", "nvidia.com/gpu=all", "management.nvidia.com/gpu=all"):
        assert not create(runtime, env=asked, cdi_devices=[cdi]).linux.devices, cdi
        assert not create(runtime, cdi_devices=[cdi], annotations={"mokka.nvidia.com/devices": "true"}
                          ).linux.devices, cdi
    assert create(runtime, cdi_devices=["notnvidia.com/gpu=0"], annotations={"mokka.nvidia.com/devices": "true"}
                  ).linux.devices


def test_nvidia_visible_devices_with_devices_none(runtime: Any, plugin_factory: Any, eight_gpu_root: Path) -> None:
    plugin_factory(devices="none")
    assert not create(runtime, env=[f"NVIDIA_VISIBLE_DEVICES={GPU_UUIDS[0]}"]).linux.devices


def test_fails_open_when_deciding_breaks(runtime: Any, plugin_factory: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from mokka_core.cluster.nri import plugin as plugin_module

    def broken(*args: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(plugin_module, "decide", broken)
    plugin = plugin_factory()
    adjust = create(runtime)
    assert not adjust.mounts and not adjust.env
    assert plugin.counters.failed == 1
    assert plugin.ready()[0]  # still registered and serving


def test_missing_root_is_a_skip_not_an_error(runtime: Any, plugin_factory: Any, node_root: Path) -> None:
    plugin = plugin_factory()
    shutil.rmtree(node_root)
    assert not create(runtime).mounts
    assert plugin.counters.skipped == 1


def test_reconnects_after_the_runtime_restarts(runtime: Any, plugin_factory: Any) -> None:
    plugin = plugin_factory()
    first = runtime.wait_for_plugin()
    wait_for(lambda: plugin.ready()[0])
    runtime.stop()
    wait_for(lambda: not plugin.ready()[0])
    assert "not registered" in plugin.ready()[1]
    time.sleep(0.3)  # a few failed dials while the runtime is away
    runtime.start()
    second = runtime.wait_for_plugin()
    assert second is not first
    assert create(runtime).mounts
    wait_for(lambda: plugin.ready()[0])
    assert plugin.counters.connections == 2


def test_plugin_waits_for_a_runtime_that_is_not_there_yet(short_dir: Path, plugin_factory: Any) -> None:
    from mokka_core.cluster.nri.runtime import FakeRuntime

    plugin = plugin_factory()
    time.sleep(0.3)
    assert not plugin.ready()[0]
    with FakeRuntime(short_dir / "nri.sock") as rt:
        assert create(rt).mounts


def test_health_endpoints(plugin_factory: Any, runtime: Any) -> None:
    from mokka_core.cluster.health import HealthServer

    plugin = plugin_factory()
    server = HealthServer("127.0.0.1:0", plugin.live, plugin.ready).start()
    try:
        url = f"http://127.0.0.1:{server.port}"
        wait_for(lambda: get(url + "/readyz")[0] == 200)
        assert get(url + "/healthz") == (200, "ok\n")
        runtime.stop()
        wait_for(lambda: get(url + "/readyz")[0] == 503)
        assert "not registered with the container runtime" in get(url + "/readyz")[1]
        assert get(url + "/healthz")[0] == 200  # a lost runtime is not a reason to restart the plugin
        plugin._in_flight[1] = time.monotonic() - 60  # a CreateContainer stuck for a minute
        assert get(url + "/healthz")[0] == 503 and "wedged" in get(url + "/healthz")[1]
        assert get(url + "/nope")[0] == 404
    finally:
        server.stop()


def test_ttrpc_errors_for_unknown_services(runtime: Any, plugin_factory: Any) -> None:
    from mokka_core.cluster.nri.ttrpc import CallFailed

    plugin_factory()
    session = runtime.wait_for_plugin()
    with pytest.raises(CallFailed, match="unknown service"):
        session.plugin.call("no.Such", "Thing", b"", 2)
    assert session.plugin.call(f"{API}.Plugin", "StopContainer", b"", 2) == b""  # unsubscribed: a no-op


def test_large_messages_cross_mux_frames(runtime: Any, plugin_factory: Any) -> None:
    plugin_factory()
    env = [f"VAR{i}={'x' * 200}" for i in range(2000)]  # ~400 KB request
    assert create(runtime, env=env).mounts


def test_settings_are_validated(node_root: Path) -> None:
    from mokka_core.cluster.nri.inject import InjectConfig
    from mokka_core.cluster.nri.plugin import PluginSettings

    with pytest.raises(ValueError, match="two digits"):
        PluginSettings(inject=InjectConfig(root=node_root), index="5")
    with pytest.raises(ValueError, match="not /"):
        InjectConfig(root=Path("/"))
    with pytest.raises(ValueError, match="devices"):
        InjectConfig(root=node_root, devices="some")
    with pytest.raises(ValueError, match="mount_path"):
        InjectConfig(root=node_root, mount_path="relative")


def test_command_serves_health_and_stops_on_sigterm(short_dir: Path, node_root: Path) -> None:
    from mokka_core.cluster.nri.runtime import FakeRuntime

    port = free_port()
    code = "import sys; from mokka_core.cluster.cli import nri_main; sys.exit(nri_main())"
    with FakeRuntime(short_dir / "nri.sock") as rt:
        proc = subprocess.Popen(
            [sys.executable, "-c", code, "--root", str(node_root), "--socket", str(short_dir / "nri.sock"),
             "--health-addr", f"127.0.0.1:{port}", "--namespaces", "ml"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            wait_for(lambda: get(f"http://127.0.0.1:{port}/readyz")[0] == 200, timeout=30)
            assert create(rt, "ml").mounts and not create(rt, "web").mounts
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=15)
        finally:
            proc.kill()
    assert proc.returncode == 0, out
    assert "registered with the runtime" in out and "ml/p/main: injected" in out
    assert "web/p/main: skipped, namespace web is not opted in" in out and "stopped" in out
    bad = subprocess.run([sys.executable, "-c", code, "--root", "/"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "not /" in bad.stderr


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, str(exc)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_concurrent_create_container_requests(runtime: Any, plugin_factory: Any) -> None:
    from concurrent.futures import ThreadPoolExecutor

    plugin = plugin_factory()
    runtime.wait_for_plugin()
    started = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        adjustments = list(pool.map(lambda i: create(runtime, env=[f"N={i}"]), range(64)))
    elapsed = time.monotonic() - started
    assert all(a.mounts for a in adjustments)
    assert plugin.counters.injected == 64 and plugin.counters.failed == 0
    assert elapsed < 10, f"64 CreateContainer calls took {elapsed:.1f} s"
