"""The NVIDIA DRA driver (k8s-dra-driver-gpu v0.4.0, the shared release binaries) on the real node.

No registry serves its chart or image here, so the image is its four programs on Mokka's Debian base (buildah), and
the objects are the ones its chart renders from docs/kind/dra-driver-values.yaml: the kubelet plugin's DaemonSet
(driver root mounted at /driver-root, the kubelet's plugin directories, /var/run/cdi), its service account and
ClusterRole, and the chart's DeviceClasses. The chart's init container (a prestart script the image carries) is left
out: it only waits for the driver root to hold nvidia-smi and the library, which Mokka's release staged first.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml
from node import KubeNode

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))

import images as recipe  # noqa: E402  (tools/images.py: Mokka's base image and buildah steps)

VALUES = REPO / "docs" / "kind" / "dra-driver-values.yaml"
NAMESPACE = "nvidia-dra-driver-gpu"
NAME = "nvidia-dra-driver-gpu"
VERSION = "v0.4.0"
IMAGE = f"localhost/k8s-dra-driver-gpu:{VERSION}"
PROGRAMS = ("gpu-kubelet-plugin", "compute-domain-kubelet-plugin", "compute-domain-daemon",
            "compute-domain-controller")
DRIVER = "gpu.nvidia.com"
REGISTRAR = "/var/lib/kubelet/plugins_registry"
PLUGINS = "/var/lib/kubelet/plugins"


def image(programs: dict[str, Path]) -> str:
    """The driver's programs on PATH of Mokka's Debian base, as its image ships them (bash for the chart's command)."""
    with recipe.container(recipe.base_image()) as working:
        for name in PROGRAMS:
            recipe.run("buildah", "copy", "--quiet", "--chmod", "0755", working, str(programs[name]),
                       f"/usr/bin/{name}", quiet=True)
        recipe.run("buildah", "config", "--entrypoint", "[]", "--cmd", "gpu-kubelet-plugin", working)
        recipe.commit(working, IMAGE)
    return IMAGE


def values(**overrides: Any) -> dict[str, Any]:
    """docs/kind/dra-driver-values.yaml with top-level overrides (as `--set` would give them)."""
    loaded: dict[str, Any] = yaml.safe_load(VALUES.read_text())
    loaded.update(overrides)
    return loaded


def _env(values: dict[str, Any]) -> list[dict[str, Any]]:
    gates = ",".join(f"{k}={str(v).lower()}" for k, v in (values.get("featureGates") or {}).items())
    return [
        {"name": "LOG_VERBOSITY", "value": "4"},
        {"name": "MASK_NVIDIA_DRIVER_PARAMS", "value": "false"},
        {"name": "NVIDIA_DRIVER_ROOT", "value": values["nvidiaDriverRoot"]},
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
        {"name": "CDI_ROOT", "value": "/var/run/cdi"},
        {"name": "NVIDIA_MIG_CONFIG_DEVICES", "value": "all"},
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "IMAGE_NAME", "value": IMAGE},
        *([{"name": "FEATURE_GATES", "value": gates}] if gates else []),
        {"name": "KUBELET_REGISTRAR_DIRECTORY_PATH", "value": REGISTRAR},
        {"name": "KUBELET_PLUGINS_DIRECTORY_PATH", "value": PLUGINS},
    ]


def _plugin_container(name: str, program: str, values: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name, "image": IMAGE, "imagePullPolicy": "Never", "securityContext": {"privileged": True},
        "command": ["bash", "-c"], "args": [f"{program} -v $(LOG_VERBOSITY)"], "env": _env(values),
        "volumeMounts": [
            {"name": "plugins-registry", "mountPath": REGISTRAR},
            {"name": "plugins", "mountPath": PLUGINS, "mountPropagation": "Bidirectional"},
            {"name": "cdi", "mountPath": "/var/run/cdi"},
            {"name": "driver-root", "mountPath": "/driver-root", "mountPropagation": "HostToContainer",
             **({"readOnly": True} if name == "compute-domains" else {})},
        ],
    }


def kubelet_plugin(values: dict[str, Any]) -> dict[str, Any]:
    """The chart's kubelet plugin DaemonSet: a container per enabled resource kind."""
    labels = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/component": "kubelet-plugin"}
    containers = []
    if values["resources"]["computeDomains"]["enabled"]:
        containers.append(_plugin_container("compute-domains", "compute-domain-kubelet-plugin", values))
    if values["resources"]["gpus"]["enabled"]:
        containers.append(_plugin_container("gpus", "gpu-kubelet-plugin", values))
    host = [("plugins-registry", REGISTRAR, None), ("plugins", PLUGINS, None), ("cdi", "/var/run/cdi", None),
            ("driver-root", values["nvidiaDriverRoot"], "DirectoryOrCreate")]
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": f"{NAME}-kubelet-plugin", "namespace": NAMESPACE},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {
                "serviceAccountName": f"{NAME}-service-account-kubeletplugin",
                "priorityClassName": "system-node-critical",
                "nodeSelector": values["kubeletPlugin"]["nodeSelector"],
                "containers": containers,
                "volumes": [{"name": volume, "hostPath": {"path": path, **({"type": kind} if kind else {})}}
                            for volume, path, kind in host],
            }},
        },
    }


def _rbac() -> list[dict[str, Any]]:
    """The chart's kubelet plugin identity: what it may read and write in the API server."""
    account = f"{NAME}-service-account-kubeletplugin"
    role = f"{NAME}-clusterrole-kubeletplugin"
    rules = [
        {"apiGroups": ["resource.nvidia.com"], "resources": ["computedomains"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims/status"], "verbs": ["update"]},
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"],
         "verbs": ["get", "list", "watch", "create", "update", "delete"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "update"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
    ]
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account, "namespace": NAMESPACE}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": role},
         "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": f"{NAME}-clusterrole-binding-kubeletplugin"},
         "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}],
         "roleRef": {"kind": "ClusterRole", "name": role, "apiGroup": "rbac.authorization.k8s.io"}},
    ]


def device_class(name: str, kind: str) -> dict[str, Any]:
    """A DeviceClass as the chart defines its own: the driver's devices of one type."""
    expression = f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == '{kind}'"
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": expression}}]}}


def objects(values: dict[str, Any]) -> list[dict[str, Any]]:
    """Everything the chart installs for GPUs, in the order helm would create it."""
    return [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}, *_rbac(),
            device_class("gpu.nvidia.com", "gpu"), device_class("mig.nvidia.com", "mig"), kubelet_plugin(values)]


def slices(kube: KubeNode) -> list[dict[str, Any]]:
    """The driver's ResourceSlices in the API server."""
    found: list[dict[str, Any]] = kube.json("get", "resourceslices", f"--field-selector=spec.driver={DRIVER}")["items"]
    return found


def devices(kube: KubeNode) -> dict[str, dict[str, Any]]:
    """Every device the driver published, by name."""
    return {device["name"]: device for item in slices(kube) for device in item["spec"].get("devices", [])}


def claim(name: str, namespace: str, device_class_name: str = "gpu.nvidia.com") -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": device_class_name}}]}}}


def claim_pod(name: str, namespace: str, claim_name: str, command: list[str], node_image: str) -> dict[str, Any]:
    """A pod whose one container holds ``claim_name`` (nothing else gives it a GPU)."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"restartPolicy": "Never", "resourceClaims": [{"name": "gpu", "resourceClaimName": claim_name}],
                     "containers": [{"name": "smi", "image": node_image, "imagePullPolicy": "Never",
                                     "command": command, "resources": {"claims": [{"name": "gpu"}]}}]}}


def allocated(kube: KubeNode, name: str, namespace: str) -> list[str]:
    """The device names the scheduler allocated to a claim."""
    status = kube.json("get", "resourceclaim", name, "-n", namespace).get("status", {})
    return [result["device"] for result in status.get("allocation", {}).get("devices", {}).get("results", [])]


def remove(kube: KubeNode, manifests: list[dict[str, Any]]) -> None:
    """The objects gone (the kubelet plugin's pods with its namespace), then its ResourceSlices."""
    for manifest in reversed(manifests):
        metadata = manifest["metadata"]
        kube.kubectl("delete", manifest["kind"], metadata["name"],
                     *(["-n", metadata["namespace"]] if "namespace" in metadata else []),
                     "--ignore-not-found", "--wait=true", "--timeout=180s")
    # the plugin deletes its slices when it stops; a plugin that never started leaves none either
    kube.kubectl("delete", "resourceslices", f"--field-selector=spec.driver={DRIVER}", "--ignore-not-found")
