"""The chart's delivery paths against the real kubelet and containerd: the NRI plugin (a pod that asked for no GPU in
a namespace the chart selects gets the driver; one outside it does not) and the allocation watcher (the kubelet's
pod-resources API shows which pod holds which GPU, in nvidia-smi's process and memory view)."""

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
    logs,
    pod_finished,
    wait_allocatable,
    wait_for,
)

LISTED = re.compile(r"^GPU \d+: .+ \(UUID: (GPU-[0-9a-f-]+)\)$", re.M)


def no_gpu_pod(name: str, namespace: str, command: list[str]) -> dict[str, object]:
    """The guide's pod without its GPU request."""
    pod = guide_pod(name, namespace, command=command)
    pod["spec"]["containers"][0].pop("resources")  # type: ignore[index]
    return pod


@pytest.fixture(scope="module")
def watched(releases: Releases) -> Iterator[Releases]:
    """The guide's releases with the allocation watcher on."""
    releases.install_mokka("--set", "allocationWatcher.enabled=true", "--set", "allocationWatcher.interval=1")
    releases.install_device_plugin()
    wait_allocatable(releases.kube, 8)
    yield releases
    releases.uninstall("nvdp", PLUGIN_NAMESPACE)
    releases.uninstall("mokka", MOKKA_NAMESPACE)


def test_nri_gives_the_driver_to_a_pod_of_a_selected_namespace_that_asked_for_no_gpu(watched: Releases) -> None:
    """docs/kind/mokka-values.yaml selects namespace default: every GPU's device node, the library and nvidia-smi
    on PATH, from the NRI plugin alone (the pod spec names none of them)."""
    apply(watched.kube, no_gpu_pod("injected", "default", ["nvidia-smi", "-L"]))
    pod = pod_finished(watched.kube, "injected")
    output = logs(watched.kube, "injected")
    assert pod["status"]["phase"] == "Succeeded", output
    assert len(LISTED.findall(output)) == 8, output
    delete_pod(watched.kube, "injected")


def test_nri_leaves_a_namespace_it_does_not_select_alone(watched: Releases) -> None:
    watched.kube.kubectl("create", "namespace", "elsewhere")
    try:
        command = ["sh", "-c", "ls /dev/nvidia* ; command -v nvidia-smi"]
        apply(watched.kube, no_gpu_pod("untouched", "elsewhere", command))
        pod = pod_finished(watched.kube, "untouched", "elsewhere")
        output = logs(watched.kube, "untouched", "elsewhere")
        assert pod["status"]["phase"] == "Failed", output  # `command -v` finds no nvidia-smi
        assert "No such file or directory" in output and "/dev/nvidia0" not in output
    finally:
        watched.kube.kubectl("delete", "namespace", "elsewhere", "--wait=true", "--timeout=120s")


def compute_apps(releases: Releases, observer: str) -> list[str]:
    """`nvidia-smi --query-compute-apps` in the observer pod: one line per process, uuid, name, memory."""
    query = "--query-compute-apps=gpu_uuid,process_name,used_gpu_memory"
    done = releases.kube.kubectl("exec", observer, "--", "nvidia-smi", query, "--format=csv,noheader", check=False)
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


def test_allocation_watcher_shows_which_pod_holds_which_gpu(watched: Releases) -> None:
    """The real kubelet's pod-resources API names the GPUs the device plugin gave a pod: nvidia-smi shows one
    process per holding container on exactly those GPUs, with memory in use; a deleted pod frees them."""
    kube = watched.kube
    apply(kube, no_gpu_pod("observer", "default", ["sleep", "3600"]))
    apply(kube, guide_pod("holder", command=["sleep", "3600"]))
    for name in ("observer", "holder"):
        wait_for(f"{name} running", lambda n=name: kube.json("get", "pod", n)["status"].get("phase") == "Running", 120)
    held = set(LISTED.findall(kube.kubectl("exec", "holder", "--", "nvidia-smi", "-L").stdout))
    assert len(held) == 2
    rows = wait_for("the holder's processes in nvidia-smi", lambda: [
        r for r in compute_apps(watched, "observer") if "default/holder/smi" in r] or None, 60)
    assert {row.split(",")[0].strip() for row in rows} == held, rows
    assert all(int(row.split(",")[2].split()[0]) > 0 for row in rows), rows
    delete_pod(kube, "holder")
    wait_for("the GPUs freed", lambda: not [r for r in compute_apps(watched, "observer") if "holder" in r], 60)
    delete_pod(kube, "observer")
