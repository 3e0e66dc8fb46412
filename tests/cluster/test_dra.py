"""The NVIDIA DRA driver's GPU kubelet plugin (v0.4.0) on the real node Mokka staged with the guide's values:
ResourceSlices in the API server with a real H100's attributes, claims allocated by the real scheduler and given to
pods through CDI, and an Xid that taints the GPU it names.

The tests run in order: each builds on the one before, as docs/kind.md's reader does.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator

import dra
import pytest
from guide import DRIVER_ROOT, MOKKA_NAMESPACE, Releases, apply, logs, mokka_ctl, wait_for
from node import KubeNode

from mokka_core.stage.paths import LIB_DIR

NAMESPACE = "dra"  # a namespace the guide's NRI values leave alone: only the claim gives a pod its GPU
LISTED = re.compile(r"^GPU \d+: (.+) \(UUID: (GPU-[0-9a-f-]+)\)$", re.M)
#: reference/captures/qx-h100.xml (product name, architecture); CUDA's table of compute capabilities (H100: 9.0)
H100 = {"productName": "NVIDIA H100 80GB HBM3", "architecture": "Hopper", "cudaComputeCapability": "9.0.0"}
H100_MEMORY = 81559 * 2**20  # <fb_memory_usage><total>81559 MiB


@pytest.fixture(scope="module")
def driver(releases: Releases, dra_image: str) -> Iterator[Releases]:
    """Mokka with the guide's values (and its allocation watcher), then the DRA driver as its chart deploys it with
    the guide's DRA values; all of it removed after the module, or when it did not come up."""
    kube = releases.kube
    try:
        releases.install_mokka("--set", "allocationWatcher.enabled=true", "--set", "allocationWatcher.interval=1")
        for manifest in dra.objects(dra.values()):
            apply(kube, manifest)
        kube.kubectl("create", "namespace", NAMESPACE)
        try:
            wait_for("8 GPUs in the driver's ResourceSlices", lambda: len(dra.devices(kube)) == 8, 180, interval=2)
        except TimeoutError as exc:
            plugin = kube.kubectl("-n", dra.NAMESPACE, "logs", f"daemonset/{dra.NAME}-kubelet-plugin", "--tail=40",
                                  check=False)
            events = kube.kubectl("-n", dra.NAMESPACE, "get", "events", check=False)
            raise TimeoutError(f"{exc}\n{plugin.stdout}{plugin.stderr}\n{events.stdout[-2000:]}") from exc
        yield releases
    finally:
        kube.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true", "--timeout=180s")
        dra.remove(kube, dra.objects(dra.values()))
        releases.uninstall("mokka", MOKKA_NAMESPACE)


def node_smi(*args: str) -> str:
    """The driver root's nvidia-smi on the host, with the driver root's library (as a GPU container has them)."""
    done = subprocess.run([str(DRIVER_ROOT / "usr/bin/nvidia-smi"), *args], capture_output=True, text=True,
                          timeout=60, check=True, env={**os.environ, "LD_LIBRARY_PATH": str(DRIVER_ROOT / LIB_DIR)})
    return done.stdout


def nvml_uuids() -> list[str]:
    """The node's GPUs by NVML index (nvml-mock-ctl's GPU numbers)."""
    return node_smi("--query-gpu=uuid", "--format=csv,noheader").split()


def holding(kube: KubeNode, pod: str, claim: str, node_image: str) -> str:
    """A pod that holds ``claim`` and lists its GPUs, running until deleted: the device the claim was given (a claim
    no pod reserves any more is deallocated)."""
    apply(kube, dra.claim(claim, NAMESPACE))
    apply(kube, dra.claim_pod(pod, NAMESPACE, claim, ["sh", "-c", "nvidia-smi -L; sleep 3600"], node_image))
    wait_for(f"{pod} running", lambda: kube.json("get", "pod", pod, "-n", NAMESPACE)["status"].get(
        "phase") == "Running", 120)
    [device] = dra.allocated(kube, claim, NAMESPACE)
    return str(device)


def release(kube: KubeNode, pod: str, claim: str) -> None:
    kube.kubectl("delete", "pod", pod, "-n", NAMESPACE, "--wait=true", "--timeout=120s")
    kube.kubectl("delete", "resourceclaim", claim, "-n", NAMESPACE, "--wait=true", "--timeout=120s")


def test_slices_publish_every_gpu_with_a_real_h100s_attributes(driver: Releases) -> None:
    published = dra.devices(driver.kube)
    assert sorted(published) == [f"gpu-{i}" for i in range(8)]
    # each GPU's PCIe root: the root complex its function sits under in the node's sysfs, found by the bus id
    # nvidia-smi reads (00000000:1B:00.0 is the PCI address 0000:1b:00.0)
    rows = [line.split(", ") for line in node_smi("--query-gpu=uuid,pci.bus_id", "--format=csv,noheader").splitlines()]
    roots = {uuid: os.readlink(DRIVER_ROOT / "sys/bus/pci/devices" / bus_id[4:].lower()).split("/")[4]
             for uuid, bus_id in rows}
    assert all(root.startswith("pci0000:") for root in roots.values()), roots
    for name, device in published.items():
        attributes = {key: next(iter(value.values())) for key, value in device["attributes"].items()}
        assert attributes["type"] == "gpu", name
        for key, expected in H100.items():
            assert attributes[key] == expected, (name, key, attributes)
        assert re.fullmatch(r"\d+\.\d+\.\d+", attributes["driverVersion"]), attributes
        assert re.fullmatch(r"GPU-[0-9a-f-]{36}", attributes["uuid"]), attributes
        assert attributes["resource.kubernetes.io/pcieRoot"] == roots[attributes["uuid"]], attributes
        assert device["capacity"]["memory"]["value"] in (str(H100_MEMORY), f"{H100_MEMORY // 2**20}Mi"), device


def test_a_claim_gives_its_pod_exactly_the_allocated_gpu(driver: Releases, images: dict[str, str]) -> None:
    kube = driver.kube
    device = holding(kube, "first", "first", images["node"])
    output = wait_for("nvidia-smi's list", lambda: LISTED.findall(logs(kube, "first", NAMESPACE)) or None, 60)
    assert [uuid for _, uuid in output] == [dra.devices(kube)[device]["attributes"]["uuid"]["string"]], output
    assert output[0][0] == H100["productName"]


def test_a_second_claim_gets_another_gpu(driver: Releases, images: dict[str, str]) -> None:
    kube = driver.kube
    second = holding(kube, "second", "second", images["node"])
    assert second != dra.allocated(kube, "first", NAMESPACE)[0]
    output = wait_for("nvidia-smi's list", lambda: LISTED.findall(logs(kube, "second", NAMESPACE)) or None, 60)
    assert [uuid for _, uuid in output] == [dra.devices(kube)[second]["attributes"]["uuid"]["string"]], output
    release(kube, "second", "second")
    release(kube, "first", "first")


def compute_apps() -> list[str]:
    """`nvidia-smi --query-compute-apps` of the node: one line per process, uuid, name, memory."""
    query = node_smi("--query-compute-apps=gpu_uuid,process_name,used_gpu_memory", "--format=csv,noheader")
    return [line.strip() for line in query.splitlines() if line.strip()]


def test_the_allocation_watcher_shows_a_claims_holder_on_its_gpu(driver: Releases, images: dict[str, str]) -> None:
    """The real kubelet reports the claim's device (pod-resources dynamic_resources): nvidia-smi shows the holding
    container as a process on exactly that GPU, and nothing once the pod is gone."""
    kube = driver.kube
    device = holding(kube, "holder", "held", images["node"])
    uuid = dra.devices(kube)[device]["attributes"]["uuid"]["string"]
    rows = wait_for("the holder in nvidia-smi", lambda: [r for r in compute_apps() if f"{NAMESPACE}/holder/smi" in r]
                    or None, 60)
    assert [row.split(",")[0].strip() for row in rows] == [uuid], rows
    release(kube, "holder", "held")
    wait_for("the GPU freed", lambda: not [r for r in compute_apps() if "holder" in r], 60)


def test_an_xid_taints_its_gpu_and_a_new_claim_avoids_it(driver: Releases, images: dict[str, str]) -> None:
    """Xid 79 on the first GPU no claim holds: the plugin's health check (NVMLDeviceHealthCheck, the guide's value)
    taints that device in its slice, and the scheduler gives the next claim another GPU."""
    kube = driver.kube
    victim = "gpu-0"
    index = nvml_uuids().index(dra.devices(kube)[victim]["attributes"]["uuid"]["string"])
    mokka_ctl(kube, "xid", str(index), "79")

    def taints() -> list[dict[str, str]]:
        found: list[dict[str, str]] = dra.devices(kube)[victim].get("taints", [])
        return found
    wait_for(f"a taint on {victim}", taints, 60, interval=1)
    assert any(t["effect"] in ("NoSchedule", "NoExecute") for t in taints()), taints()
    assert holding(kube, "after", "after", images["node"]) != victim
    release(kube, "after", "after")
    mokka_ctl(kube, "reset")
