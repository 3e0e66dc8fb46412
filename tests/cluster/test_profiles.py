"""Other boards on the real node: the guide's releases with `gpu.profile` set, the Node's allocatable GPUs and a pod
given two of them; and `helm upgrade` from one board to another, re-staged in place."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
import yaml
from guide import (
    CDI_DIR,
    MOKKA_NAMESPACE,
    PLUGIN_NAMESPACE,
    Releases,
    apply,
    delete_pod,
    guide_pod,
    logs,
    pod_finished,
    rollout,
    wait_allocatable,
)

#: profile -> (GPUs on the node, the product name a real board reports: reference/captures/qx-<profile>.xml)
BOARDS = {"a100": (8, "NVIDIA A100-SXM4-40GB"), "gb200": (4, "NVIDIA GB200"), "h100": (8, "NVIDIA H100 80GB HBM3")}


@pytest.fixture
def clean(releases: Releases) -> Iterator[Releases]:
    yield releases
    releases.uninstall("nvdp", PLUGIN_NAMESPACE)
    releases.uninstall("mokka", MOKKA_NAMESPACE)


def spec_uuids() -> set[str]:
    """The GPUs of the node's CDI spec, by UUID."""
    devices = yaml.safe_load((CDI_DIR / "nvidia.yaml").read_text())["devices"]
    return {d["name"] for d in devices if d["name"].startswith("GPU-")}


def two_gpus(releases: Releases, name: str) -> list[str]:
    """The product names nvidia-smi -L lists in a pod given two GPUs."""
    apply(releases.kube, guide_pod(name, command=["nvidia-smi", "-L"]))
    pod = pod_finished(releases.kube, name)
    output = logs(releases.kube, name)
    assert pod["status"]["phase"] == "Succeeded", output
    delete_pod(releases.kube, name)
    return re.findall(r"^GPU \d+: (.+) \(UUID: GPU-[0-9a-f-]+\)$", output, re.M)


@pytest.mark.parametrize("profile", ["a100", "gb200"])
def test_board_on_the_node(clean: Releases, profile: str) -> None:
    count, product = BOARDS[profile]
    clean.install_mokka("--set", f"gpu.profile={profile}")
    clean.install_device_plugin()
    wait_allocatable(clean.kube, count)
    assert two_gpus(clean, f"{profile}-pod") == [product, product]


def test_upgrade_to_another_board_restages_in_place(clean: Releases) -> None:
    """h100 -> a100 with `helm upgrade`: the node pod rolls and stages the new board at the same root. The device
    plugin enumerates GPUs once, when it starts: on a real node a board change means its restart too."""
    clean.install_mokka()
    clean.install_device_plugin()
    wait_allocatable(clean.kube, 8)
    h100 = spec_uuids()
    clean.install_mokka("--set", "gpu.profile=a100", action="upgrade")
    rollout(clean.kube, MOKKA_NAMESPACE, "mokka")
    a100 = spec_uuids()
    assert len(a100) == 8 and a100.isdisjoint(h100)
    clean.kube.kubectl("-n", PLUGIN_NAMESPACE, "delete", "pod", "-l", "app.kubernetes.io/name=nvidia-device-plugin",
                       "--wait=true", "--timeout=120s")
    rollout(clean.kube, PLUGIN_NAMESPACE, "nvdp-nvidia-device-plugin")
    wait_allocatable(clean.kube, 8)
    assert two_gpus(clean, "after-upgrade") == [BOARDS["a100"][1]] * 2
