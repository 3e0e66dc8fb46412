"""docs/kind.md on a real node: the mokka chart with the guide's values, the real NVIDIA device plugin (v0.19.3, its
own chart and the guide's values), GPU pods, a fault that reaches the scheduler, and removal that leaves nothing.

The tests run in order: each step builds on the one before, as the guide's reader does.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from guide import (
    CDI_DIR,
    DRIVER_ROOT,
    GPU,
    GUIDE,
    MOKKA_NAMESPACE,
    PLUGIN_NAMESPACE,
    Releases,
    allocatable,
    apply,
    delete_pod,
    guide_pod,
    logs,
    mokka_ctl,
    pod_finished,
    wait_allocatable,
    wait_for,
)

FGO_NAMESPACE = yaml.safe_load((GUIDE / "mokka-values.yaml").read_text())["integrations"]["fakeGpuOperator"][
    "targetNamespace"]
PROFILES = Path(__file__).resolve().parents[2] / "packages/mokka-core/src/mokka_core/schema/profiles"
H100 = "NVIDIA H100 80GB HBM3"  # reference/captures/qx-h100.xml <product_name>
UUID = re.compile(r"^GPU (\d+): (.+) \(UUID: (GPU-[0-9a-f-]+)\)$", re.M)


@pytest.fixture(scope="module")
def guide(releases: Releases) -> Iterator[Releases]:
    """Both releases installed as the guide says; whatever a test left installed is removed after the module."""
    releases.install_mokka()
    releases.install_device_plugin()
    yield releases
    releases.uninstall("nvdp", PLUGIN_NAMESPACE)
    releases.uninstall("mokka", MOKKA_NAMESPACE)


def node_uuids() -> list[str]:
    spec = yaml.safe_load((CDI_DIR / "nvidia.yaml").read_text())
    return [d["name"] for d in spec["devices"] if d["name"].startswith("GPU-")]


def test_mokka_stages_the_node_at_the_driver_root(guide: Releases) -> None:
    assert (DRIVER_ROOT / "usr/bin/nvidia-smi").is_file()
    assert (DRIVER_ROOT / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1").exists()
    assert sorted(p.name for p in (DRIVER_ROOT / "dev").glob("nvidia[0-9]*")) == [f"nvidia{i}" for i in range(8)]
    spec = yaml.safe_load((CDI_DIR / "nvidia.yaml").read_text())
    assert spec["kind"] == "nvidia.com/gpu"
    assert len(node_uuids()) == 8


def test_fgo_finds_every_profile_where_it_reads_them(guide: Releases) -> None:
    """The discovery contract of the chart's README (fake-gpu-operator pairing): in FGO's namespace (the guide's
    targetNamespace), one ConfigMap per built-in profile by FGO's name, selectable by the contract label, whose
    profile.yaml is the built-in profile file unchanged."""
    found = guide.kube.json("get", "configmaps", "-n", FGO_NAMESPACE, "-l", "fake-gpu-operator/gpu-profile=true")
    by_name = {item["metadata"]["name"]: item for item in found["items"]}
    assert sorted(by_name) == sorted(f"gpu-profile-{p.stem}" for p in PROFILES.glob("*.yaml"))
    for name, item in by_name.items():
        profile = name.removeprefix("gpu-profile-")
        assert item["data"]["profile.yaml"] == (PROFILES / f"{profile}.yaml").read_text(), name
        assert item["metadata"]["labels"]["mokka/profile-name"] == profile


def test_device_plugin_advertises_the_eight_gpus(guide: Releases) -> None:
    wait_allocatable(guide.kube, 8)


def test_a_pod_given_two_gpus_sees_exactly_those(guide: Releases) -> None:
    """The guide's pod in namespace default (the NRI plugin's, which leaves GPU containers to the plugin)."""
    apply(guide.kube, guide_pod("gpu-check"))
    pod = pod_finished(guide.kube, "gpu-check")
    output = logs(guide.kube, "gpu-check")
    assert pod["status"]["phase"] == "Succeeded", output
    listed = UUID.findall(output)
    assert [(index, name) for index, name, _ in listed] == [("0", H100), ("1", H100)], output
    assert len({uuid for *_, uuid in listed} & set(node_uuids())) == 2
    assert len(re.findall(r"^/dev/nvidia\d+$", output, re.M)) == 2
    delete_pod(guide.kube, "gpu-check")


def test_a_pod_no_injector_touches_gets_its_gpus_through_cdi_alone(guide: Releases) -> None:
    """A namespace the NRI plugin does not select: only the device plugin's CDI spec (driver files, the
    persistenced socket, two device nodes) delivers the driver, as on a real node with the container toolkit."""
    guide.kube.kubectl("create", "namespace", "plain")
    try:
        apply(guide.kube, guide_pod("cdi-only", "plain", command=["nvidia-smi", "-L"]))
        pod = pod_finished(guide.kube, "cdi-only", "plain")
        output = logs(guide.kube, "cdi-only", "plain")
        assert pod["status"]["phase"] == "Succeeded", output
        assert len(UUID.findall(output)) == 2, output
    finally:
        guide.kube.kubectl("delete", "namespace", "plain", "--wait=true", "--timeout=120s")


def test_a_pod_asking_for_nine_stays_pending_with_the_schedulers_reason(guide: Releases) -> None:
    apply(guide.kube, guide_pod("too-many", gpus=9))

    def unschedulable() -> str | None:
        conditions = guide.kube.json("get", "pod", "too-many")["status"].get("conditions", [])
        found = [c for c in conditions if c["type"] == "PodScheduled" and c["status"] == "False"]
        return found[0].get("message") if found and found[0].get("reason") == "Unschedulable" else None

    message = wait_for("the scheduler's verdict", unschedulable, 60)
    assert f"Insufficient {GPU}" in message
    assert guide.kube.json("get", "pod", "too-many")["status"]["phase"] == "Pending"
    delete_pod(guide.kube, "too-many")


def test_xid_79_takes_the_gpu_out_of_allocatable(guide: Releases) -> None:
    """The plugin watches NVML's Xid events: a GPU fallen off the bus (Xid 79) is marked unhealthy."""
    mokka_ctl(guide.kube, "xid", "0", "79")
    seconds = wait_allocatable(guide.kube, 7, timeout=60)
    assert seconds < 60


def test_the_plugin_keeps_a_gpu_unhealthy_until_it_restarts(guide: Releases) -> None:
    """Real v0.19.3 behaviour: the plugin never marks a GPU healthy again (its health loop only ever sends
    Unhealthy); a GPU that recovered comes back when the plugin's pod restarts and enumerates it anew."""
    mokka_ctl(guide.kube, "reset")
    time.sleep(15)
    assert allocatable(guide.kube) == 7
    guide.kube.kubectl("-n", PLUGIN_NAMESPACE, "delete", "pod", "-l", "app.kubernetes.io/name=nvidia-device-plugin",
                       "--wait=true", "--timeout=120s")
    wait_allocatable(guide.kube, 8, timeout=90)


def test_uninstall_leaves_nothing_of_the_node(guide: Releases) -> None:
    guide.uninstall("nvdp", PLUGIN_NAMESPACE)
    guide.uninstall("mokka", MOKKA_NAMESPACE)
    left = sorted(str(p) for p in DRIVER_ROOT.rglob("*")) if DRIVER_ROOT.exists() else []
    assert left == [], f"left under the driver root: {left[:20]}"
    assert not (CDI_DIR / "nvidia.yaml").exists()
    assert not list(Path("/dev").glob("nvidia*"))
    wait_allocatable(guide.kube, 0, timeout=60)
