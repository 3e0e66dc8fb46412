"""The NVIDIA DRA driver's GPU kubelet plugin (v0.4.0) on the real node Mokka staged with the guide's values:
ResourceSlices in the API server with a real H100's attributes, claims allocated by the real scheduler and given to
pods through CDI, and an Xid that taints the GPU it names.

The tests run in order: each builds on the one before, as docs/kind.md's reader does.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator

import dra
import pytest
from guide import DRIVER_ROOT, MOKKA_NAMESPACE, Releases, apply, logs, mokka_ctl, pod_finished, wait_for

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


def nvml_uuids() -> list[str]:
    """The node's GPUs by NVML index (nvml-mock-ctl's GPU numbers), as the driver root's nvidia-smi lists them."""
    done = subprocess.run([str(DRIVER_ROOT / "usr/bin/nvidia-smi"), "--query-gpu=uuid", "--format=csv,noheader"],
                          capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.split()


def test_slices_publish_every_gpu_with_a_real_h100s_attributes(driver: Releases) -> None:
    published = dra.devices(driver.kube)
    assert sorted(published) == [f"gpu-{i}" for i in range(8)]
    for name, device in published.items():
        attributes = {key: next(iter(value.values())) for key, value in device["attributes"].items()}
        assert attributes["type"] == "gpu", name
        for key, expected in H100.items():
            assert attributes[key] == expected, (name, key, attributes)
        assert re.fullmatch(r"\d+\.\d+\.\d+", attributes["driverVersion"]), attributes
        assert re.fullmatch(r"GPU-[0-9a-f-]{36}", attributes["uuid"]), attributes
        assert attributes["resource.kubernetes.io/pcieRoot"].startswith("pci0000:"), attributes
        assert device["capacity"]["memory"]["value"] in (str(H100_MEMORY), f"{H100_MEMORY // 2**20}Mi"), device


def test_a_claim_gives_its_pod_exactly_the_allocated_gpu(driver: Releases, images: dict[str, str]) -> None:
    kube = driver.kube
    apply(kube, dra.claim("first", NAMESPACE))
    apply(kube, dra.claim_pod("first", NAMESPACE, "first", ["sh", "-c", "sleep 1; nvidia-smi -L"], images["node"]))
    pod = pod_finished(kube, "first", NAMESPACE)
    output = logs(kube, "first", NAMESPACE)
    assert pod["status"]["phase"] == "Succeeded", output
    [device] = dra.allocated(kube, "first", NAMESPACE)
    listed = LISTED.findall(output)
    assert [uuid for _, uuid in listed] == [dra.devices(kube)[device]["attributes"]["uuid"]["string"]], output
    assert listed[0][0] == H100["productName"]


def test_a_second_claim_gets_another_gpu(driver: Releases, images: dict[str, str]) -> None:
    kube = driver.kube
    apply(kube, dra.claim("second", NAMESPACE))
    apply(kube, dra.claim_pod("second", NAMESPACE, "second", ["nvidia-smi", "-L"], images["node"]))
    pod = pod_finished(kube, "second", NAMESPACE)
    assert pod["status"]["phase"] == "Succeeded", logs(kube, "second", NAMESPACE)
    assert dra.allocated(kube, "second", NAMESPACE) != dra.allocated(kube, "first", NAMESPACE)
    held = {dra.allocated(kube, name, NAMESPACE)[0] for name in ("first", "second")}
    assert len(held) == 2


def compute_apps() -> list[str]:
    """`nvidia-smi --query-compute-apps` of the node (the driver root's nvidia-smi on the host)."""
    query = "--query-compute-apps=gpu_uuid,process_name,used_gpu_memory"
    done = subprocess.run([str(DRIVER_ROOT / "usr/bin/nvidia-smi"), query, "--format=csv,noheader"],
                          capture_output=True, text=True, timeout=60)
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


def test_the_allocation_watcher_shows_a_claims_holder_on_its_gpu(driver: Releases, images: dict[str, str]) -> None:
    """The real kubelet reports the claim's device (pod-resources dynamic_resources): nvidia-smi shows the holding
    container as a process on exactly that GPU, and nothing once the pod is gone."""
    kube = driver.kube
    apply(kube, dra.claim("held", NAMESPACE))
    apply(kube, dra.claim_pod("holder", NAMESPACE, "held", ["sleep", "3600"], images["node"]))
    wait_for("the holder running", lambda: kube.json("get", "pod", "holder", "-n", NAMESPACE)["status"].get(
        "phase") == "Running", 120)
    [device] = dra.allocated(kube, "held", NAMESPACE)
    uuid = dra.devices(kube)[device]["attributes"]["uuid"]["string"]
    rows = wait_for("the holder in nvidia-smi", lambda: [r for r in compute_apps() if f"{NAMESPACE}/holder/smi" in r]
                    or None, 60)
    assert [row.split(",")[0].strip() for row in rows] == [uuid], rows
    kube.kubectl("delete", "pod", "holder", "-n", NAMESPACE, "--wait=true", "--timeout=120s")
    kube.kubectl("delete", "resourceclaim", "held", "-n", NAMESPACE, "--wait=true", "--timeout=120s")
    wait_for("the GPU freed", lambda: not [r for r in compute_apps() if "holder" in r], 60)


def test_an_xid_taints_its_gpu_and_a_new_claim_avoids_it(driver: Releases, images: dict[str, str]) -> None:
    """Xid 79 on the first GPU no claim holds: the plugin's health check (NVMLDeviceHealthCheck, the guide's value)
    taints that device in its slice, and the scheduler gives the next claim another GPU."""
    kube = driver.kube
    for name in ("first", "second"):
        kube.kubectl("delete", "pod", name, "-n", NAMESPACE, "--wait=true", "--timeout=120s")
        kube.kubectl("delete", "resourceclaim", name, "-n", NAMESPACE, "--wait=true", "--timeout=120s")
    victim = "gpu-0"
    index = nvml_uuids().index(dra.devices(kube)[victim]["attributes"]["uuid"]["string"])
    mokka_ctl(kube, "xid", str(index), "79")

    def taints() -> list[dict[str, str]]:
        found: list[dict[str, str]] = dra.devices(kube)[victim].get("taints", [])
        return found
    wait_for(f"a taint on {victim}", taints, 60, interval=1)
    assert any(t["effect"] in ("NoSchedule", "NoExecute") for t in taints()), taints()
    apply(kube, dra.claim("after", NAMESPACE))
    apply(kube, dra.claim_pod("after", NAMESPACE, "after", ["nvidia-smi", "-L"], images["node"]))
    pod = pod_finished(kube, "after", NAMESPACE)
    assert pod["status"]["phase"] == "Succeeded", logs(kube, "after", NAMESPACE)
    assert dra.allocated(kube, "after", NAMESPACE) != [victim]
    mokka_ctl(kube, "reset")
