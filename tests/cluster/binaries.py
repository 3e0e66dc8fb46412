"""The programs of the real single-node cluster, built by the tests themselves from pinned releases.

Kubernetes (kube/go.mod), containerd (containerd/go.mod), the device plugin, the container toolkit and
node-feature-discovery (tests/k8s/deviceplugin, tests/k8s/toolkit, tests/k8s/nfd) come from the Go module proxy; Debian gives etcd, runc, the CNI
plugins and iptables; the pause program is the ``pause.c`` that the kubernetes module ships, linked static.
Everything is cached under the consumer cache: only a fresh machine compiles.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from mokka_core.stage.store import atomic_write
from mokka_core.testing.consumers import (
    apt_tool,
    cache_dir,
    ensure_apt,
    go_module_program,
    go_module_source,
    missing,
)

HERE = Path(__file__).resolve().parent
K8S_TESTS = HERE.parent / "k8s"
TOOLKIT = "github.com/NVIDIA/nvidia-container-toolkit"
NFD = "sigs.k8s.io/node-feature-discovery"

#: Debian packages the node needs, by the program that shows each is there.
DEBIAN = {"etcd": "etcd-server", "runc": "runc", "iptables": "iptables", "conntrack": "conntrack",
          "openssl": "openssl", "ip": "iproute2"}


def pinned(module: Path, path: str) -> str:
    """The version of ``path`` that ``module``'s go.mod requires."""
    found = re.search(rf"^\s*(?:require\s+)?{re.escape(path)} (v\S+)", (module / "go.mod").read_text(), re.M)
    if not found:
        raise LookupError(f"{module / 'go.mod'} requires no {path}")
    return found.group(1)


KUBERNETES_VERSION = pinned(HERE / "kube", "k8s.io/kubernetes")
CONTAINERD_VERSION = pinned(HERE / "containerd", "github.com/containerd/containerd/v2")


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kubelet: Path
    kubectl: Path
    containerd: Path
    containerd_shim: Path
    ctr: Path
    runc: Path
    cni_dir: Path
    pause: Path
    device_plugin: Path
    gpu_feature_discovery: Path
    nvidia_ctk: Path
    nvidia_cdi_hook: Path
    nfd_master: Path
    nfd_worker: Path
    nfd_gc: Path

    def link_into(self, directory: Path) -> Path:
        """``directory`` holding every program under its own name (the cache names carry a hash; containerd finds
        its shim and runc on PATH by name)."""
        directory.mkdir(parents=True, exist_ok=True)
        for field, program in vars(self).items():
            if field != "cni_dir":
                name = field.replace("_", "-") if field != "containerd_shim" else "containerd-shim-runc-v2"
                (directory / name).symlink_to(program)
        return directory


def debian_tools() -> dict[str, Path]:
    """Each Debian program by name (installed with apt-get when missing); the CNI plugins' directory as "cni"."""
    found = {program: apt_tool(program, package) for program, package in DEBIAN.items()}
    bridge = Path("/usr/lib/cni/bridge")
    if not bridge.exists():
        ensure_apt(["containernetworking-plugins"], present=False)
    found["cni"] = bridge.parent if bridge.exists() else missing("containernetworking-plugins: no /usr/lib/cni/bridge")
    return found


def kubernetes(name: str) -> Path:
    version = f"-X k8s.io/component-base/version.gitVersion={KUBERNETES_VERSION}"
    return go_module_program(HERE / "kube", f"k8s.io/kubernetes/cmd/{name}", name,
                             flags=("-ldflags", f"-s -w {version}"), cgo=False)


def containerd(name: str) -> Path:
    version = f"-X github.com/containerd/containerd/v2/version.Version={CONTAINERD_VERSION}"
    return go_module_program(HERE / "containerd", f"github.com/containerd/containerd/v2/cmd/{name}", name,
                             flags=("-tags", "no_btrfs no_devmapper no_zfs", "-ldflags", f"-s -w {version}"),
                             cgo=False)


def pause() -> Path:
    """The sandbox's pause program, compiled static from the pause.c of the pinned kubernetes module."""
    source = go_module_source(HERE / "kube", "k8s.io/kubernetes") / "build" / "pause" / "linux" / "pause.c"
    binary = cache_dir() / f"pause-{KUBERNETES_VERSION}"
    if not binary.exists():
        compiler = shutil.which("gcc") or missing("gcc is needed for the pause program")
        built = binary.with_name(f".{binary.name}.partial")
        result = subprocess.run([compiler, "-Os", "-static", "-o", str(built), str(source)],
                                capture_output=True, text=True, timeout=300)
        if result.returncode != 0:
            missing(f"compiling {source} failed: {result.stderr.strip()[-500:]}")
        atomic_write(binary, built.read_bytes(), mode=0o755)
        built.unlink()
    return binary


def build_all() -> Binaries:
    debian = debian_tools()
    device_plugin = K8S_TESTS / "deviceplugin"
    toolkit = K8S_TESTS / "toolkit"
    nfd = {name: go_module_program(K8S_TESTS / "nfd", f"{NFD}/cmd/{name}", name)
           for name in ("nfd-master", "nfd-worker", "nfd-gc")}
    return Binaries(
        etcd=debian["etcd"], runc=debian["runc"], cni_dir=debian["cni"],
        kube_apiserver=kubernetes("kube-apiserver"),
        kube_controller_manager=kubernetes("kube-controller-manager"),
        kube_scheduler=kubernetes("kube-scheduler"),
        kubelet=kubernetes("kubelet"),
        kubectl=kubernetes("kubectl"),
        containerd=containerd("containerd"),
        containerd_shim=containerd("containerd-shim-runc-v2"),
        ctr=containerd("ctr"),
        pause=pause(),
        device_plugin=go_module_program(device_plugin, "github.com/NVIDIA/k8s-device-plugin/cmd/nvidia-device-plugin",
                                        "nvidia-device-plugin"),
        gpu_feature_discovery=go_module_program(
            device_plugin, "github.com/NVIDIA/k8s-device-plugin/cmd/gpu-feature-discovery", "gpu-feature-discovery"),
        nvidia_ctk=go_module_program(toolkit, f"{TOOLKIT}/cmd/nvidia-ctk", "nvidia-ctk"),
        nvidia_cdi_hook=go_module_program(toolkit, f"{TOOLKIT}/cmd/nvidia-cdi-hook", "nvidia-cdi-hook"),
        nfd_master=nfd["nfd-master"], nfd_worker=nfd["nfd-worker"], nfd_gc=nfd["nfd-gc"],
    )
