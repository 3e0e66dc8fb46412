"""A real single-node Kubernetes: etcd, containerd (CRI, CDI, NRI), API server, controller manager, scheduler
and kubelet as child processes, their state in one scratch directory, started and stopped by the tests.

Host paths that cannot move (the kubelet's device-plugin directory, containerd's shim sockets, the CDI and NRI
directories, the runc state) are listed in HOST_PATHS: the fixture records them with the rest of the host
(host.py) and puts everything back after.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from binaries import Binaries
from pki import Pki, kubeconfig, make

NODE_NAME = "mokka-node"
SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"
POD_SUBNET = "10.77.88.0/24"
GATEWAY = "10.77.88.1"  # the bridge's address: the API server listens there, so pods reach it
BRIDGE = "mokka-cni0"
PAUSE_IMAGE = "localhost/pause:mokka"
# the DRA driver's health check taints a GPU in its ResourceSlice: the field is alpha in v1.34 (KEP-5055), and the
# scheduler then also watches DeviceTaintRules (resource.k8s.io/v1alpha3, served once the API server enables it)
FEATURE_GATES = "--feature-gates=DRADeviceTaints=true"
#: Host paths a node writes under whatever it is told (recorded before, removed after when they were absent).
HOST_PATHS = [Path(p) for p in (
    "/var/lib/kubelet", "/run/containerd", "/run/nri", "/run/cdi", "/etc/cdi", "/run/nvidia", "/var/lib/mokka",
    "/var/log/pods", "/var/log/containers", "/var/lib/cni", "/run/netns", "/usr/bin/nvidia-ctk",
    "/usr/bin/nvidia-cdi-hook", "/etc/nvidia-container-toolkit", "/run/nvidia-persistenced",
    "/etc/kubernetes",
)]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for(what: str, check: Callable[[], Any], timeout: float, interval: float = 0.5) -> Any:
    """``check()``'s first truthy value within ``timeout`` seconds, else TimeoutError naming ``what``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as exc:
            last = exc
        else:
            if last:
                return last
        time.sleep(interval)
    raise TimeoutError(f"{what} not within {timeout:.0f} s (last: {last!r})")


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, timeout: float = 20) -> None:
        if not self.alive():
            return
        os.killpg(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(10)


@dataclass
class KubeNode:
    """The node and its control plane. ``start()`` returns when the Node is Ready with its InternalIP."""

    binaries: Binaries
    work: Path
    labels: dict[str, str] = field(default_factory=dict)
    processes: list[Process] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.bin = self.binaries.link_into(self.work / "bin")
        self.pki: Pki = make(self.work / "pki", SERVICE_IP, GATEWAY)
        self.apiserver_port = free_port()
        self.server = f"https://{GATEWAY}:{self.apiserver_port}"
        self.kubeconfig = self.work / "admin.kubeconfig"
        self.kubeconfig.write_text(kubeconfig(self.pki, self.server))
        self.containerd_socket = self.work / "containerd" / "containerd.sock"
        self.env = {**os.environ, "PATH": f"{self.bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "KUBECONFIG": str(self.kubeconfig)}

    # -- processes ------------------------------------------------------------------------------------------

    def spawn(self, name: str, *argv: str | Path) -> Process:
        log = self.work / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            popen = subprocess.Popen([str(a) for a in argv], stdout=out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=self.env, start_new_session=True)
        process = Process(name, popen, log)
        self.processes.append(process)
        return process

    def check_alive(self) -> None:
        for process in self.processes:
            if not process.alive():
                raise RuntimeError(f"{process.name} exited {process.popen.returncode}:\n{process.tail()}")

    # -- the components -------------------------------------------------------------------------------------

    def start(self) -> None:
        # A node's / is a shared mount (systemd makes it so at boot; kind's nodes too): the kubelet refuses
        # HostToContainer and Bidirectional volumes (the DRA driver's) under a private one.
        subprocess.run(["mount", "--make-shared", "/"], check=True, capture_output=True, timeout=60)
        self.service_network()
        etcd_port = free_port()
        self.spawn("etcd", self.binaries.etcd, "--name", NODE_NAME, "--data-dir", self.work / "etcd",
                   "--listen-client-urls", f"http://127.0.0.1:{etcd_port}",
                   "--advertise-client-urls", f"http://127.0.0.1:{etcd_port}",
                   "--listen-peer-urls", f"http://127.0.0.1:{free_port()}", "--log-level", "warn")
        self.start_containerd()
        self.spawn("kube-apiserver", self.bin / "kube-apiserver", f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                   f"--bind-address={GATEWAY}", f"--advertise-address={GATEWAY}", f"--secure-port={self.apiserver_port}",
                   f"--tls-cert-file={self.pki.apiserver}", f"--tls-private-key-file={self.pki.apiserver_key}",
                   f"--client-ca-file={self.pki.ca}", f"--service-cluster-ip-range={SERVICE_CIDR}",
                   "--service-account-issuer=https://kubernetes.default.svc",
                   f"--service-account-key-file={self.pki.service_account_pub}",
                   f"--service-account-signing-key-file={self.pki.service_account_key}",
                   "--authorization-mode=Node,RBAC", "--allow-privileged=true",
                   "--kubelet-preferred-address-types=InternalIP",
                   f"--kubelet-client-certificate={self.pki.admin}", f"--kubelet-client-key={self.pki.admin_key}",
                   "--profiling=false", FEATURE_GATES, "--runtime-config=resource.k8s.io/v1alpha3=true")
        wait_for("the API server", lambda: self.kubectl("get", "--raw", "/readyz", check=False).returncode == 0, 120)
        common = (f"--kubeconfig={self.kubeconfig}", "--leader-elect=false", "--bind-address=127.0.0.1",
                  f"--secure-port={free_port()}")
        self.spawn("kube-controller-manager", self.bin / "kube-controller-manager", *common,
                   f"--service-account-private-key-file={self.pki.service_account_key}",
                   f"--root-ca-file={self.pki.ca}", "--use-service-account-credentials=false", FEATURE_GATES)
        self.spawn("kube-scheduler", self.bin / "kube-scheduler", *common[:3], f"--secure-port={free_port()}",
                   FEATURE_GATES)
        self.start_kubelet()
        wait_for("the Node", lambda: self.kubectl("get", "node", NODE_NAME, check=False).returncode == 0, 120)
        # A loopback node IP gives the Node no addresses, and `kubectl logs/exec` need one: the kubelet keeps this.
        self.kubectl("patch", "node", NODE_NAME, "--subresource=status", "--type=merge", "-p", json.dumps(
            {"status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                                      {"type": "Hostname", "address": NODE_NAME}]}}))
        wait_for("the Node Ready", self.node_ready, 120)
        wait_for("the default service account", lambda: self.kubectl(
            "get", "serviceaccount", "default", check=False).returncode == 0, 60)

    def service_network(self) -> None:
        """What kube-proxy and the CNI give a real node, for the one Service pods use here: the ``kubernetes``
        Service's cluster IP reaches the API server (in-cluster clients: the DRA driver's plugins, NFD, GFD).

        The bridge exists first with its gateway address, where the API server listens; pods route the service
        range through it, and a DNAT rule sends the cluster IP's 443 to the API server."""
        for argv in (["ip", "link", "add", BRIDGE, "type", "bridge"],
                     ["ip", "addr", "add", f"{GATEWAY}/{POD_SUBNET.split('/')[1]}", "dev", BRIDGE],
                     ["ip", "link", "set", BRIDGE, "up"],
                     ["iptables", "-t", "nat", "-A", "PREROUTING", "-d", f"{SERVICE_IP}/32", "-p", "tcp",
                      "--dport", "443", "-j", "DNAT", "--to-destination", f"{GATEWAY}:{self.apiserver_port}"]):
            subprocess.run(argv, check=True, capture_output=True, timeout=60, env=self.env)

    def start_containerd(self) -> None:
        root = self.work / "containerd"
        cni = self.work / "cni"
        (cni / "net.d").mkdir(parents=True, exist_ok=True)
        (cni / "net.d" / "10-mokka.conflist").write_text(json.dumps({
            "cniVersion": "1.0.0", "name": "mokka-cluster",
            # the bridge holds the subnet's gateway address, so the kubelet reaches pod IPs (probes) and pods the
            # API server (service_network); no default route and no masquerade: nothing beyond this machine
            "plugins": [{"type": "bridge", "bridge": BRIDGE, "isGateway": True, "isDefaultGateway": False,
                         "ipMasq": False,
                         "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_SUBNET}]],
                                  "routes": [{"dst": SERVICE_CIDR}], "dataDir": str(cni / "ipam")}}],
        }))
        runtime = 'plugins."io.containerd.cri.v1.runtime"'
        config = f"""version = 3
root = "{root / 'root'}"
state = "{root / 'state'}"
[grpc]
  address = "{self.containerd_socket}"
[{runtime}]
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [{runtime}.containerd]
    default_runtime_name = "runc"
    [{runtime}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{runtime}.containerd.runtimes.runc.options]
        BinaryName = "{self.binaries.runc}"
        SystemdCgroup = false
  [{runtime}.cni]
    bin_dirs = ["{self.binaries.cni_dir}"]
    conf_dir = "{cni / 'net.d'}"
[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "{PAUSE_IMAGE}"
[plugins."io.containerd.nri.v1.nri"]
  disable = false
  socket_path = "/var/run/nri/nri.sock"
"""
        (root / "config.toml").parent.mkdir(parents=True, exist_ok=True)
        (root / "config.toml").write_text(config)
        self.spawn("containerd", self.bin / "containerd", "--config", root / "config.toml")
        wait_for("containerd", lambda: self.ctr("version", check=False).returncode == 0, 60)

    def start_kubelet(self) -> None:
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "failCgroupV1": False, "cgroupDriver": "cgroupfs",
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                               "x509": {"clientCAFile": str(self.pki.ca)}},
            "authorization": {"mode": "Webhook"},
            "address": "127.0.0.1", "port": free_port(), "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1", "healthzPort": free_port(),
            "failSwapOn": False, "serializeImagePulls": False,
            # the images are imported, never pulled: nothing may collect them
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                             "nodefs.inodesFree": "1%"},
            "nodeStatusUpdateFrequency": "2s", "syncFrequency": "5s",
        }
        path = self.work / "kubelet.yaml"
        path.write_text(yaml.safe_dump(config))
        labels = ",".join(f"{k}={v}" for k, v in self.labels.items())
        self.spawn("kubelet", self.bin / "kubelet", f"--config={path}", f"--kubeconfig={self.kubeconfig}",
                   f"--hostname-override={NODE_NAME}", "--node-ip=127.0.0.1", "--root-dir=/var/lib/kubelet",
                   *([f"--node-labels={labels}"] if labels else []))

    def node_ready(self) -> bool:
        self.check_alive()
        node = json.loads(self.kubectl("get", "node", NODE_NAME, "-o", "json").stdout)
        return any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"]["conditions"])

    # -- clients --------------------------------------------------------------------------------------------

    def kubectl(self, *args: str, check: bool = True, timeout: float = 120,
                stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([str(self.bin / "kubectl"), *args], capture_output=True, text=True, timeout=timeout,
                              env=self.env, input=stdin)
        if check and done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} exited {done.returncode}: {done.stderr.strip()[-800:]}")
        return done

    def ctr(self, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([str(self.bin / "ctr"), "--address", str(self.containerd_socket), "-n", "k8s.io", *args],
                              capture_output=True, text=True, timeout=timeout, env=self.env)
        if check and done.returncode != 0:
            raise RuntimeError(f"ctr {' '.join(args)} exited {done.returncode}: {done.stderr.strip()[-800:]}")
        return done

    def json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    # -- teardown -------------------------------------------------------------------------------------------

    def stop(self) -> None:
        """Every container gone, then the components in reverse order."""
        by_name = {p.name: p for p in self.processes}
        if "kubelet" in by_name:
            by_name["kubelet"].stop()
        if "containerd" in by_name and by_name["containerd"].alive():
            self._remove_containers()
        for process in reversed(self.processes):
            process.stop()
        self._kill_leftover_shims()

    def _remove_containers(self) -> None:
        for task in self.ctr("tasks", "list", "-q", check=False).stdout.split():
            self.ctr("tasks", "kill", "-s", "SIGKILL", task, check=False)
        deadline = time.monotonic() + 30
        while self.ctr("tasks", "list", "-q", check=False).stdout.split() and time.monotonic() < deadline:
            for task in self.ctr("tasks", "list", "-q", check=False).stdout.split():
                self.ctr("tasks", "delete", "-f", task, check=False)
            time.sleep(0.5)
        for container in self.ctr("containers", "list", "-q", check=False).stdout.split():
            self.ctr("containers", "delete", container, check=False)

    def _kill_leftover_shims(self) -> None:
        shim = str(self.bin / "containerd-shim-runc-v2")
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit():
                try:
                    argv0 = (proc / "cmdline").read_bytes().split(b"\0")[0].decode()
                except OSError:
                    continue
                if argv0 == shim or argv0.startswith(str(self.bin)):
                    with contextlib.suppress(OSError):
                        os.kill(int(proc.name), signal.SIGKILL)
