"""The node itself: Ready, with what a GPU node's runtime offers (CDI and NRI on), and the API reachable."""

from __future__ import annotations

from node import NODE_NAME, KubeNode


def test_node_ready_with_its_address(kube: KubeNode) -> None:
    node = kube.json("get", "node", NODE_NAME)
    assert {"type": "InternalIP", "address": "127.0.0.1"} in node["status"]["addresses"]
    assert node["status"]["nodeInfo"]["kubeletVersion"].startswith("v1.34.")
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://2.")
    assert node["metadata"]["labels"]["mokka.dev/gpu"] == "h100"
