"""The Node's labels from the guide's device plugin release with GPU feature discovery and node-feature-discovery
(v0.17.3, the chart's subchart) on: what a scheduler and a GPU operator read off a real GPU node.

GFD reads the GPUs through NVML (the driver root) and the machine from the host's /sys; NFD's worker reads the PCI
functions under the host's /sys. The guide's NRI values give both containers the node's sysfs (nri.sysfsNamespaces).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from guide import MOKKA_NAMESPACE, PLUGIN_NAMESPACE, Releases
from node import NODE_NAME, KubeNode, wait_for

PROFILES = Path(__file__).resolve().parents[2] / "packages/mokka-core/src/mokka_core/schema/profiles"


def profile(name: str) -> dict:  # type: ignore[type-arg]
    loaded: dict = yaml.safe_load((PROFILES / f"{name}.yaml").read_text())  # type: ignore[type-arg]
    return loaded


def labels(kube: KubeNode) -> dict[str, str]:
    found: dict[str, str] = kube.json("get", "node", NODE_NAME)["metadata"].get("labels", {})
    return found


def settled_labels(kube: KubeNode, expected: dict[str, str], timeout: float = 240) -> dict[str, str]:
    """The Node's labels once every ``expected`` key has its value (or the last seen, on timeout, for the diff)."""
    try:
        wait_for("the Node's GPU labels", lambda: all(labels(kube).get(k) == v for k, v in expected.items()),
                 timeout, interval=2)
    except TimeoutError:
        pass
    return labels(kube)


@pytest.fixture
def labelled(releases: Releases) -> Iterator[Releases]:
    yield releases
    releases.uninstall("nvdp", PLUGIN_NAMESPACE)
    releases.uninstall("mokka", MOKKA_NAMESPACE)
    # NFD's master removes its labels when its objects go: nothing of the simulated node stays on the Node
    wait_for("the GPU labels gone", lambda: not any(k.startswith(("nvidia.com/", "feature.node.kubernetes.io/"))
                                                    for k in labels(releases.kube)), 120)


def shown(all_labels: dict[str, str], expected: dict[str, str]) -> dict[str, str | None]:
    return {key: all_labels.get(key) for key in expected}


def test_an_h100_node_gets_the_labels_of_a_dgx_h100(labelled: Releases) -> None:
    labelled.install_mokka()
    labelled.install_device_plugin(labels=True)
    expected = {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",  # reference/captures/qx-h100.xml, spaces as GFD writes
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.memory": "81559",  # <fb_memory_usage><total> in MiB
        "nvidia.com/gpu.machine": profile("h100")["system"]["dmi"]["product_name"],
        "nvidia.com/gpu.family": "hopper",
        "nvidia.com/cuda.driver.major": profile("h100")["system"]["driver_version"].split(".")[0],
        "feature.node.kubernetes.io/pci-10de.present": "true",
    }
    found = settled_labels(labelled.kube, expected)
    assert shown(found, expected) == expected, sorted(found.items())


def test_a_gb200_tray_is_labelled_with_its_nvlink_clique(labelled: Releases) -> None:
    labelled.install_mokka("--set", "gpu.profile=gb200")
    labelled.install_device_plugin(labels=True)
    fabric = profile("gb200")["device_defaults"]["fabric"]
    expected = {
        "nvidia.com/gpu.product": "NVIDIA-GB200",
        "nvidia.com/gpu.count": "4",
        "nvidia.com/gpu.clique": f"{fabric['cluster_uuid']}.{fabric['clique_id']}",
        "feature.node.kubernetes.io/pci-10de.present": "true",
    }
    found = settled_labels(labelled.kube, expected)
    assert shown(found, expected) == expected, sorted(found.items())
