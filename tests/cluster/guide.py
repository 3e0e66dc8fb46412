"""The steps of docs/kind.md on the real node, with the guide's own files: what the tests and the guide share."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml
from node import NODE_NAME, KubeNode, wait_for

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "kind"
DRIVER_ROOT = Path("/var/lib/mokka/root")
CDI_DIR = Path("/var/run/cdi")
MOKKA_NAMESPACE = "mokka"
PLUGIN_NAMESPACE = "nvidia-device-plugin"
GPU = "nvidia.com/gpu"


def guide_pod(name: str, namespace: str = "default", gpus: int | None = None,
              command: list[str] | None = None) -> dict[str, Any]:
    """docs/kind/gpu-pod.yaml, renamed (and its GPU count or command changed when a test says so)."""
    pod: dict[str, Any] = yaml.safe_load((GUIDE / "gpu-pod.yaml").read_text())
    pod["metadata"].update(name=name, namespace=namespace)
    container = pod["spec"]["containers"][0]
    if gpus is not None:
        container["resources"]["limits"][GPU] = gpus
    if command is not None:
        container["command"] = command
    return pod


def apply(kube: KubeNode, manifest: dict[str, Any]) -> None:
    kube.kubectl("apply", "-f", "-", stdin=json.dumps(manifest))


def allocatable(kube: KubeNode, resource: str = GPU) -> int:
    return int(kube.json("get", "node", NODE_NAME)["status"]["allocatable"].get(resource, "0"))


def wait_allocatable(kube: KubeNode, count: int, timeout: float = 60) -> float:
    """Seconds until the Node's allocatable GPUs are ``count``."""
    started = time.monotonic()
    wait_for(f"allocatable {GPU} = {count}", lambda: allocatable(kube) == count, timeout, interval=1)
    return time.monotonic() - started


def pod_finished(kube: KubeNode, name: str, namespace: str = "default", timeout: float = 120) -> dict[str, Any]:
    """The pod once Succeeded or Failed."""
    def done() -> dict[str, Any] | None:
        pod: dict[str, Any] = kube.json("get", "pod", name, "-n", namespace)
        return pod if pod["status"].get("phase") in ("Succeeded", "Failed") else None
    try:
        return wait_for(f"pod {namespace}/{name} to finish", done, timeout)  # type: ignore[no-any-return]
    except TimeoutError as exc:
        described = kube.kubectl("describe", "pod", name, "-n", namespace, check=False).stdout
        raise TimeoutError(f"{exc}\n{described[-2000:]}") from exc


def logs(kube: KubeNode, name: str, namespace: str = "default") -> str:
    return kube.kubectl("logs", name, "-n", namespace).stdout


def delete_pod(kube: KubeNode, name: str, namespace: str = "default") -> None:
    kube.kubectl("delete", "pod", name, "-n", namespace, "--ignore-not-found", "--wait=true", "--timeout=120s")


def mokka_ctl(kube: KubeNode, *args: str) -> str:
    """``kubectl -n mokka exec daemonset/mokka -c node -- nvml-mock-ctl ARGS``, as the guide breaks a GPU."""
    return kube.kubectl("-n", MOKKA_NAMESPACE, "exec", "daemonset/mokka", "-c", "node", "--",
                        "nvml-mock-ctl", *args).stdout


def rollout(kube: KubeNode, namespace: str, daemonset: str, timeout: int = 180) -> None:
    kube.kubectl("-n", namespace, "rollout", "status", f"daemonset/{daemonset}", f"--timeout={timeout}s",
                 timeout=timeout + 30)


def no_pods(kube: KubeNode, namespace: str, timeout: float = 120) -> None:
    wait_for(f"no pods in {namespace}", lambda: not kube.json("get", "pods", "-n", namespace)["items"], timeout)


class Releases:
    """helm against the node, and the guide's two releases: mokka (charts/mokka with the guide's values) and the
    device plugin (its pinned release's chart with the guide's values, images from this machine)."""

    def __init__(self, kube: KubeNode, helm: list[str], plugin_chart: Path, plugin_image: str,
                 nfd_image: str) -> None:
        self.kube, self.command, self.plugin_chart = kube, helm, plugin_chart
        self.plugin_image, self.nfd_image = plugin_image, nfd_image

    def helm(self, *args: str, check: bool = True, timeout: float = 300) -> str:
        done = subprocess.run([*self.command, *args], capture_output=True, text=True, env=self.kube.env,
                              timeout=timeout)
        if check and done.returncode != 0:
            raise RuntimeError(f"helm {' '.join(args)} exited {done.returncode}: {done.stderr.strip()[-1500:]}")
        return done.stdout

    def install_mokka(self, *extra: str, action: str = "install") -> None:
        if not self.kube.json("get", "namespaces", "--field-selector=metadata.name=gpu-operator")["items"]:
            self.kube.kubectl("create", "namespace", "gpu-operator")
        self.helm(action, "mokka", str(REPO / "charts" / "mokka"), "-n", MOKKA_NAMESPACE, "--create-namespace",
                  "-f", str(GUIDE / "mokka-values.yaml"), *extra)
        rollout(self.kube, MOKKA_NAMESPACE, "mokka")

    def install_device_plugin(self, *extra: str, labels: bool = False) -> None:
        """The guide's device plugin release, its images from this machine. GPU feature discovery and NFD (the
        guide's values turn them on) only with ``labels``: the tests of the Node's labels wait for them."""
        repository, tag = self.plugin_image.rsplit(":", 1)
        nfd_repository, nfd_tag = self.nfd_image.rsplit(":", 1)
        images = ["--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
                  "--set", "image.pullPolicy=Never", "--set", f"nfd.image.repository={nfd_repository}",
                  "--set", f"nfd.image.tag={nfd_tag}", "--set", "nfd.image.pullPolicy=Never"]
        if not labels:
            images += ["--set", "gfd.enabled=false", "--set", "nfd.enabled=false"]
        self.helm("install", "nvdp", str(self.plugin_chart), "-n", PLUGIN_NAMESPACE, "--create-namespace",
                  "-f", str(GUIDE / "device-plugin-values.yaml"), *images, *extra)
        rollout(self.kube, PLUGIN_NAMESPACE, "nvdp-nvidia-device-plugin")

    def uninstall(self, release: str, namespace: str) -> None:
        if release in self.helm("list", "-n", namespace, "-q"):
            self.helm("uninstall", release, "-n", namespace, "--wait", "--timeout", "180s")
        no_pods(self.kube, namespace)
