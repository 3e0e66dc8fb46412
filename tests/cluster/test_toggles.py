"""Surfaces toggled with Helm values on the real node: `helm upgrade --set surfaces.pci.state=failed` reaches the
running node through its ConfigMap (no pod restarts), and what the device plugin and a running GPU pod see follows."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from guide import (
    MOKKA_NAMESPACE,
    PLUGIN_NAMESPACE,
    Releases,
    apply,
    delete_pod,
    guide_pod,
    wait_allocatable,
    wait_for,
)

LISTED = re.compile(r"^GPU \d+: .+ \(UUID: GPU-[0-9a-f-]+\)$", re.M)


@pytest.fixture
def running(releases: Releases) -> Iterator[Releases]:
    """The guide's releases and a pod holding two GPUs that keeps running."""
    releases.install_mokka()
    releases.install_device_plugin()
    wait_allocatable(releases.kube, 8)
    apply(releases.kube, guide_pod("holder", command=["sleep", "3600"]))
    wait_for("the GPU pod running", lambda: releases.kube.json("get", "pod", "holder")["status"].get(
        "phase") == "Running", 120)
    yield releases
    delete_pod(releases.kube, "holder")
    releases.uninstall("nvdp", PLUGIN_NAMESPACE)
    releases.uninstall("mokka", MOKKA_NAMESPACE)


def smi_in_pod(releases: Releases) -> str:
    done = releases.kube.kubectl("exec", "holder", "--", "nvidia-smi", "-L", check=False)
    return done.stdout + done.stderr


def pods(releases: Releases) -> dict[str, tuple[str, int]]:
    """uid and restart count of every pod of the test, by name."""
    found = {}
    for namespace in ("default", MOKKA_NAMESPACE, PLUGIN_NAMESPACE):
        for pod in releases.kube.json("get", "pods", "-n", namespace)["items"]:
            restarts = sum(c.get("restartCount", 0) for c in pod["status"].get("containerStatuses", []))
            found[pod["metadata"]["name"]] = (pod["metadata"]["uid"], restarts)
    return found


def test_pci_failed_with_helm_reaches_a_running_pod_without_a_restart(running: Releases) -> None:
    assert len(LISTED.findall(smi_in_pod(running))) == 2
    before = pods(running)
    running.install_mokka("--set", "surfaces.pci.state=failed", action="upgrade")
    # config space reads 0xff: the driver loses the GPUs, as after a PCIe link failure
    wait_for("the running pod to see its GPUs lost", lambda: "GPU is lost" in smi_in_pod(running), 120)
    # real v0.19.3: the plugin's event wait fails on a lost GPU and it marks every device unhealthy
    wait_allocatable(running.kube, 0, timeout=60)
    running.install_mokka("--set", "surfaces.pci.state=healthy", action="upgrade")
    wait_for("the running pod to see its two GPUs again", lambda: len(LISTED.findall(smi_in_pod(running))) == 2, 120)
    assert pods(running) == before, "a surface toggle restarted a pod"
