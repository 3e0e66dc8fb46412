"""The chart through real helm v3: lint, every profile x representative surface settings, validated with
kubernetes-validate --strict, and the rendered objects checked field by field."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml
from chartlib import CHART, Helm, documents, find

PROFILES = ("a100", "h100", "h200", "b200", "gb200", "gb300", "l40s", "l4", "a10g", "t4")
SURFACES = ("gpu", "pci", "cdi", "imex", "nvlink", "fabricmanager", "ib")
ROOT = "/var/lib/mokka/root"

TOPOLOGY = {"domains": [{"name": "nvl72-a", "uuid": "8c4f3b1e-5d2a-4e6f-9a7b-0c1d2e3f4a5b",
                         "cliques": [{"id": 1, "nodes": ["gpu-node-1", "gpu-node-2"]}]}]}

# Representative surface settings: defaults, every surface failed, only the driver footprint, and a
# mixed case with everything else the chart can switch (count, topology, FGO in another namespace).
COMBINATIONS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "all-failed": {"surfaces": {name: {"state": "failed"} for name in SURFACES}},
    "gpu-only": {"surfaces": {name: {"enabled": False} for name in SURFACES if name != "gpu"}},
    "mixed": {
        "gpu": {"count": 2},
        "surfaces": {"cdi": {"enabled": False}, "pci": {"state": "failed"}, "ib": {"enabled": False}},
        "topology": TOPOLOGY,
        "nodeSelector": {"mokka.dev/pool": "sim"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "integrations": {"fakeGpuOperator": {"enabled": True, "targetNamespace": "gpu-operator"}},
        "kernelLog": {"host": True},
    },
}

# Both cluster components on, with every setting away from its default.
CLUSTER: dict[str, Any] = {
    "gpu": {"profile": "gb200"},
    "nodeSelector": {"mokka.dev/pool": "sim"},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "priorityClassName": "system-node-critical",
    "imagePullSecrets": [{"name": "pull"}],
    "allocationWatcher": {"enabled": True, "podResourcesDir": "/var/snap/k8s/kubelet/pod-resources",
                          "interval": 0.5, "usedFraction": 0.25, "resource": "example.com/gpu",
                          "resources": {"limits": {"memory": "128Mi"}}},
    "nri": {"enabled": True, "socketDir": "/run/containerd/nri", "pluginName": "mokka-sim", "pluginIndex": 5,
            "namespaces": ["team-a", "team-b"], "excludedNamespaces": ["kube-system", "monitoring"],
            "optAnnotation": "example.com/mock-gpu", "deviceMode": "annotated",
            "deviceAnnotation": "example.com/mock-devices", "mountPath": "/opt/gpu", "healthPort": 9440},
    "images": {"nri": {"registry": "registry.example", "repository": "sim/nri", "tag": "dev"}},
}
# Extra cases of the validated batch: (profile, values name) beyond the profile x COMBINATIONS product.
EXTRA_CASES = {("gb200", "cluster"): CLUSTER}


def kubernetes_versions() -> list[str]:
    """The chart's floor (Chart.yaml kubeVersion) and the newest version kubernetes-validate knows."""
    from kubernetes_validate import utils

    floor = yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"].lstrip(">=").split("-")[0]
    return sorted({utils.major_minor(floor), utils.major_minor(utils.latest_version())})


def kubernetes_validate(files: list[Path]) -> None:
    """One kubernetes-validate --strict run per Kubernetes version over all files (its start-up dominates)."""
    exe = shutil.which("kubernetes-validate") or str(Path(sys.executable).parent / "kubernetes-validate")
    for version in kubernetes_versions():
        result = subprocess.run([exe, "--strict", "--quiet", "-k", version, *map(str, files)],
                                capture_output=True, text=True)
        assert result.returncode == 0, f"kubernetes-validate --strict -k {version}:\n{result.stdout}{result.stderr}"


def daemonset(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return find(docs, "DaemonSet", "mokka-test")


def container(docs: list[dict[str, Any]], name: str = "node") -> dict[str, Any]:
    (found,) = [c for c in daemonset(docs)["spec"]["template"]["spec"]["containers"] if c["name"] == name]
    return found


def nri_daemonset(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return find(docs, "DaemonSet", "mokka-test-nri")


def flags(args: list[str], flag: str) -> list[str]:
    return [args[i + 1] for i, arg in enumerate(args) if arg == flag]


def surfaces_file(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The node's surfaces.yaml, read as `mokka node up --surfaces-file` reads it: {surface: settings}."""
    from mokka_core.schema.loader import load_surfaces
    from mokka_core.schema.yamldoc import parse_yaml

    text = find(docs, "ConfigMap", "mokka-test-profile")["data"]["surfaces.yaml"]
    assert parse_yaml(text, "surfaces.yaml")["version"] == 1
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "surfaces.yaml"
        path.write_text(text)
        return load_surfaces(path)


def test_helm_lint_is_clean(helm: Helm) -> None:
    for values in (None, {**COMBINATIONS["mixed"], **CLUSTER}):
        extra = ["-f", str(helm.values_file(values))] if values else []
        result = helm.run("lint", "--strict", *extra)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "0 chart(s) failed" in result.stdout
        assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout, result.stdout


def test_every_profile_and_surface_combination_renders_and_validates(helm: Helm, tmp_path: Path) -> None:
    combinations = {**COMBINATIONS, **{combo: values for (_, combo), values in EXTRA_CASES.items()}}
    cases = [(profile, combo) for profile in PROFILES for combo in COMBINATIONS] + list(EXTRA_CASES)

    def render(case: tuple[str, str]) -> Path:
        profile, combo = case
        values = {**combinations[combo], "gpu": {**combinations[combo].get("gpu", {}), "profile": profile}}
        path = tmp_path / f"{profile}-{combo}.yaml"
        path.write_text(helm.render(values))
        return path

    with ThreadPoolExecutor(max_workers=4) as pool:
        files = list(pool.map(render, cases))
    for (profile, combo), path in zip(cases, files, strict=True):
        docs = documents(path.read_text())
        kinds = sorted(d["kind"] for d in docs)
        # "mixed" pairs with fake-gpu-operator: a ConfigMap per built-in profile, and its topology
        expected = ["ConfigMap", "DaemonSet"] + (["ConfigMap"] * (len(PROFILES) + 1) if combo == "mixed" else []) + (
            ["DaemonSet"] if combo == "cluster" else [])
        assert kinds == sorted(expected), f"{profile}/{combo}: {kinds}"
        profile_map = find(docs, "ConfigMap", "mokka-test-profile")
        assert yaml.safe_load(profile_map["data"]["profile.yaml"])["name"] == profile
        surfaces_file(docs)  # what the node reads it with
    kubernetes_validate(files)


def test_daemonset_runs_the_node_cli_with_every_setting(helm: Helm) -> None:
    values = {**COMBINATIONS["mixed"], "surfaces": {"imex": {"enabled": False}, "ib": {"state": "failed"},
                                                      "pci": {"enabled": False, "state": "failed"}}}
    docs = documents(helm.render(values))
    node = container(docs)
    args = node["args"]
    assert node["command"] == ["mokka", "node", "up"]
    assert flags(args, "--root") == [ROOT]
    assert flags(args, "--profile-file") == ["/etc/mokka/profile.yaml"]
    assert flags(args, "--gpus") == ["2"]
    assert flags(args, "--node-name") == ["$(NODE_NAME)"]
    assert flags(args, "--overlay-file") == ["/etc/mokka/topology/topology.yaml"]
    assert flags(args, "--surfaces-file") == ["/etc/mokka/surfaces.yaml"]
    assert "--disable" not in args and "--fail" not in args  # the settings are in the file, changed in place
    assert surfaces_file(docs) == {"imex": {"enabled": False}, "ib": {"state": "failed"},
                                   "pci": {"enabled": False, "state": "failed"}}
    env = {e["name"]: e for e in node["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert node["readinessProbe"]["exec"]["command"] == ["mokka", "node", "status", "--root", ROOT, "--ready"]
    assert node["lifecycle"]["preStop"]["exec"]["command"] == ["mokka", "node", "down", "--root", ROOT]


def test_defaults_pass_no_surface_settings_and_no_count(helm: Helm) -> None:
    docs = documents(helm.render())
    args = container(docs)["args"]
    assert "--disable" not in args and "--fail" not in args and "--gpus" not in args
    assert surfaces_file(docs) == {}  # every surface as the node type has it
    explicit = {name: {"enabled": True, "state": "healthy"} for name in SURFACES}
    assert find(documents(helm.render({"surfaces": explicit})), "ConfigMap", "mokka-test-profile")["data"][
        "surfaces.yaml"] == "version: 1\nsurfaces: {}\n"
    assert "--overlay-file" not in args
    # the cluster components are opt-in: no sidecar, no NRI DaemonSet
    assert [c["name"] for c in daemonset(docs)["spec"]["template"]["spec"]["containers"]] == ["node"]
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "DaemonSet"] == ["mokka-test"]


def test_host_paths_reach_the_host_at_the_same_paths(helm: Helm) -> None:
    docs = documents(helm.render())
    spec = daemonset(docs)["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["name"]: m for m in container(docs)["volumeMounts"]}
    # The root at its host path, so CDI hostPaths and library links written inside it hold on the host.
    assert volumes["root"]["hostPath"] == {"path": ROOT, "type": "DirectoryOrCreate"}
    assert mounts["root"]["mountPath"] == ROOT
    # The host's CDI directory apart from the root (nested, its mount point would stay in the host's root after
    # the pod): the node links nvidia.yaml there to the spec it stages under the root.
    assert volumes["cdi"]["hostPath"] == {"path": "/var/run/cdi", "type": "DirectoryOrCreate"}
    assert mounts["cdi"]["mountPath"] == "/host/cdi"
    assert flags(container(docs)["args"], "--cdi-spec-dir") == ["/host/cdi"]
    host_paths = sorted(v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v)
    assert host_paths == [ROOT, "/var/run/cdi"]


def test_cdi_off_mounts_no_cdi_directory(helm: Helm) -> None:
    docs = documents(helm.render({"surfaces": {"cdi": {"enabled": False}}}))
    spec = daemonset(docs)["spec"]["template"]["spec"]
    assert [v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v] == [ROOT]
    assert "--cdi-spec-dir" not in container(docs)["args"]


def test_custom_root_moves_every_path(helm: Helm) -> None:
    root = "/srv/mokka/node-a"
    docs = documents(helm.render({"node": {"root": root, "cdiSpecDir": "/etc/cdi"}}))
    node = container(docs)
    mounts = {m["name"]: m["mountPath"] for m in node["volumeMounts"]}
    assert mounts["root"] == root and mounts["cdi"] == "/host/cdi"
    assert flags(node["args"], "--root") == [root]
    assert root in node["readinessProbe"]["exec"]["command"]
    volumes = {v["name"]: v for v in daemonset(docs)["spec"]["template"]["spec"]["volumes"]}
    assert volumes["cdi"]["hostPath"]["path"] == "/etc/cdi"


def test_default_affinity_avoids_control_plane_nodes(helm: Helm) -> None:
    spec = daemonset(documents(helm.render()))["spec"]["template"]["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert len(terms) == 1  # one term: both expressions must hold
    expressions = {(e["key"], e["operator"]) for e in terms[0]["matchExpressions"]}
    assert ("node-role.kubernetes.io/control-plane", "DoesNotExist") in expressions
    assert ("node-role.kubernetes.io/master", "DoesNotExist") in expressions
    assert "tolerations" not in spec  # no blanket toleration that would let it onto tainted control planes


def test_checksum_changes_with_profile_count_and_topology(helm: Helm) -> None:
    def checksum(values: dict[str, Any] | None) -> str:
        pod = daemonset(documents(helm.render(values)))["spec"]["template"]["metadata"]
        return pod["annotations"]["checksum/config"]

    base = checksum(None)
    assert checksum(None) == base
    variants = [{"gpu": {"profile": "a100"}}, {"topology": TOPOLOGY},
                {"gpu": {"customProfile": "version: '1.0'\nsystem: {driver_version: 550.163.01}\n"}}]
    sums = [checksum(v) for v in variants]
    assert len({base, *sums}) == len(variants) + 1


def test_a_surface_setting_changes_only_the_configmap_not_the_pod(helm: Helm) -> None:
    """The running node re-renders surfaces.yaml in place: no new pod template, so no restart (a real node whose
    PCI config space goes bad keeps its driver, and GPU containers keep their mounts)."""
    base = documents(helm.render())
    every = {name: {"enabled": name in ("gpu", "cdi"), "state": "failed"} for name in SURFACES}
    for surfaces in ({"pci": {"state": "failed"}}, {"imex": {"enabled": False}}, every):
        docs = documents(helm.render({"surfaces": surfaces}))
        assert daemonset(docs)["spec"]["template"] == daemonset(base)["spec"]["template"], surfaces
        assert surfaces_file(docs) != surfaces_file(base)
    # the one that is a pod change: without the cdi surface the host's CDI directory is not mounted
    docs = documents(helm.render({"surfaces": {"cdi": {"enabled": False}}}))
    assert daemonset(docs)["spec"]["template"] != daemonset(base)["spec"]["template"]


def test_custom_profile_text_is_kept_verbatim_and_a_map_is_rendered(helm: Helm) -> None:
    text = "# my node\nversion: \"1.0\"\nname: mine\nsystem:\n  driver_version: \"550.163.01\"\n"
    docs = documents(helm.render({"gpu": {"customProfile": text}}))
    cm = find(docs, "ConfigMap", "mokka-test-profile")
    assert cm["data"]["profile.yaml"] == text
    assert cm["metadata"]["labels"]["mokka/profile-name"] == "custom"
    body = {"version": "1.0", "name": "mine", "system": {"driver_version": "550.163.01"}}
    docs = documents(helm.render({"gpu": {"customProfile": body}}))
    assert yaml.safe_load(find(docs, "ConfigMap", "mokka-test-profile")["data"]["profile.yaml"]) == body


def test_profile_configmap_holds_the_builtin_file(helm: Helm) -> None:
    for profile in ("a100", "t4"):
        docs = documents(helm.render({"gpu": {"profile": profile}}))
        data = find(docs, "ConfigMap", "mokka-test-profile")["data"]["profile.yaml"]
        assert data == (CHART / "profiles" / f"{profile}.yaml").read_text()


def test_topology_configmap_is_the_overlay_the_node_reads(helm: Helm) -> None:
    docs = documents(helm.render({"topology": TOPOLOGY}))
    overlay = yaml.safe_load(find(docs, "ConfigMap", "mokka-test-topology")["data"]["topology.yaml"])
    assert overlay == {"version": 1, **TOPOLOGY}
    from mokka_core.schema.overlays import TopologyOverlay

    placement = TopologyOverlay.model_validate(overlay).placement("gpu-node-2")
    assert placement == ("8c4f3b1e-5d2a-4e6f-9a7b-0c1d2e3f4a5b", 1)
    sources = daemonset(docs)["spec"]["template"]["spec"]["volumes"]
    (config,) = [v for v in sources if v["name"] == "config"]
    paths = [item["path"] for src in config["projected"]["sources"] for item in src["configMap"]["items"]]
    assert paths == ["profile.yaml", "surfaces.yaml", "topology/topology.yaml"]


def test_images_per_component(helm: Helm) -> None:
    node = container(documents(helm.render()))
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert node["image"] == f"localhost/mokka-node:{chart['appVersion']}"
    values = {"images": {"node": {"registry": "registry.example", "repository": "sim/node", "tag": "dev",
                                  "pullPolicy": "Always"}}}
    node = container(documents(helm.render(values)))
    assert node["image"] == "registry.example/sim/node:dev" and node["imagePullPolicy"] == "Always"


def test_no_rbac_and_no_api_token(helm: Helm) -> None:
    docs = documents(helm.render({**COMBINATIONS["mixed"], **CLUSTER}))
    assert {d["kind"] for d in docs} == {"ConfigMap", "DaemonSet"}
    for pods in (daemonset(docs), nri_daemonset(docs)):
        assert pods["spec"]["template"]["spec"]["automountServiceAccountToken"] is False


def test_container_is_not_privileged(helm: Helm) -> None:
    security = container(documents(helm.render()))["securityContext"]
    assert not security.get("privileged")
    assert security["capabilities"]["drop"] == ["ALL"]
    assert set(security["capabilities"]["add"]) == {"CHOWN", "DAC_OVERRIDE", "FOWNER", "MKNOD"}


def test_host_kernel_log_is_opt_in_and_mounts_the_hosts_dev_kmsg(helm: Helm) -> None:
    default = documents(helm.render())
    assert "--host-kmsg" not in container(default)["args"]
    assert "host-kmsg" not in {v["name"] for v in daemonset(default)["spec"]["template"]["spec"]["volumes"]}
    docs = documents(helm.render({"kernelLog": {"host": True}}))
    node = container(docs)
    assert flags(node["args"], "--host-kmsg") == ["/host/dev/kmsg"]
    assert {m["name"]: m["mountPath"] for m in node["volumeMounts"]}["host-kmsg"] == "/host/dev/kmsg"
    volumes = {v["name"]: v for v in daemonset(docs)["spec"]["template"]["spec"]["volumes"]}
    assert volumes["host-kmsg"]["hostPath"] == {"path": "/dev/kmsg", "type": "CharDevice"}
    # the runtime's device rules let only a privileged container open a host device it did not add; the API
    # server refuses privileged with allowPrivilegeEscalation false
    security = node["securityContext"]
    assert security["privileged"] is True and security["allowPrivilegeEscalation"] is True
    assert security["runAsUser"] == 0 and security["readOnlyRootFilesystem"] is True


@pytest.mark.parametrize("example", sorted(p.name for p in (CHART / "examples").glob("*.yaml")))
def test_documented_examples_render_and_validate(helm: Helm, tmp_path: Path, example: str) -> None:
    values = yaml.safe_load((CHART / "examples" / example).read_text())
    path = tmp_path / example
    path.write_text(helm.render(values, release=Path(example).stem))
    kubernetes_validate([path])


# -- cluster components ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster_docs(helm: Helm) -> list[dict[str, Any]]:
    return documents(helm.render({**CLUSTER, "node": {"root": "/srv/mokka/root"}}))


def security_without_capabilities(security: dict[str, Any]) -> None:
    assert security["runAsUser"] == 0 and not security.get("privileged")
    assert security["allowPrivilegeEscalation"] is False and security["readOnlyRootFilesystem"] is True
    assert security["capabilities"] == {"drop": ["ALL"]}


def test_allocation_watcher_sidecar(cluster_docs: list[dict[str, Any]]) -> None:
    spec = daemonset(cluster_docs)["spec"]["template"]["spec"]
    assert [c["name"] for c in spec["containers"]] == ["node", "allocation-watcher"]
    watcher = container(cluster_docs, "allocation-watcher")
    assert watcher["command"] == ["mokka-allocwatch"]
    args = watcher["args"]
    assert flags(args, "--root") == ["/srv/mokka/root"]
    assert flags(args, "--socket") == ["/var/snap/k8s/kubelet/pod-resources/kubelet.sock"]
    assert flags(args, "--interval") == ["0.5"] and flags(args, "--used-fraction") == ["0.25"]
    assert flags(args, "--resource") == ["example.com/gpu"]
    assert watcher["image"] == container(cluster_docs)["image"]  # images.allocationWatcher unset: the node image
    assert watcher["resources"] == {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}}
    security_without_capabilities(watcher["securityContext"])
    mounts = {m["name"]: m for m in watcher["volumeMounts"]}
    assert mounts == {
        "pod-resources": {"name": "pod-resources", "mountPath": "/var/snap/k8s/kubelet/pod-resources",
                          "readOnly": True},
        # the node's own root volume (override file under it): no hostPath of its own that outlives the release
        "root": {"name": "root", "mountPath": "/srv/mokka/root"},
        "config": {"name": "config", "mountPath": "/etc/mokka", "readOnly": True},  # the node file names it
    }
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["pod-resources"]["hostPath"]["path"] == "/var/snap/k8s/kubelet/pod-resources"
    assert "state" not in volumes
    assert sorted(v["hostPath"]["path"] for v in volumes.values() if "hostPath" in v) == [
        "/srv/mokka/root", "/var/run/cdi", "/var/snap/k8s/kubelet/pod-resources"]


def test_nri_daemonset(cluster_docs: list[dict[str, Any]]) -> None:
    nri_set = nri_daemonset(cluster_docs)
    node_set = daemonset(cluster_docs)
    labels = nri_set["spec"]["selector"]["matchLabels"]
    assert labels["app.kubernetes.io/component"] == "nri"
    assert labels != node_set["spec"]["selector"]["matchLabels"]
    pod = nri_set["spec"]["template"]["spec"]
    node_pod = node_set["spec"]["template"]["spec"]
    for key in ("nodeSelector", "affinity", "tolerations", "priorityClassName", "imagePullSecrets"):
        assert pod[key] == node_pod[key], key  # the same nodes as the node DaemonSet
    assert pod["automountServiceAccountToken"] is False
    (plugin,) = pod["containers"]
    assert plugin["command"] == ["mokka-nri"]
    assert plugin["image"] == "registry.example/sim/nri:dev"
    args = plugin["args"]
    expected = {"--root": "/srv/mokka/root", "--socket": "/run/containerd/nri/nri.sock", "--plugin-name": "mokka-sim",
                "--plugin-index": "05", "--mount-path": "/opt/gpu", "--namespaces": "team-a,team-b",
                "--excluded-namespaces": "mokka,kube-system,monitoring", "--opt-annotation": "example.com/mock-gpu",
                "--devices": "annotated", "--devices-annotation": "example.com/mock-devices",
                "--health-addr": ":9440"}
    assert {flag: flags(args, flag) for flag in expected} == {flag: [v] for flag, v in expected.items()}
    assert plugin["ports"] == [{"name": "health", "containerPort": 9440, "protocol": "TCP"}]
    assert plugin["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert plugin["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    security_without_capabilities(plugin["securityContext"])
    mounts = {m["name"]: m for m in plugin["volumeMounts"]}
    assert mounts == {
        "nri-socket": {"name": "nri-socket", "mountPath": "/run/containerd/nri", "readOnly": True},
        # at its host path: the plugin asks the runtime to bind exactly this path into containers
        "root": {"name": "root", "mountPath": "/srv/mokka/root", "readOnly": True},
    }
    volumes = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
    assert volumes == {"nri-socket": "/run/containerd/nri", "root": "/srv/mokka/root"}


def test_nri_defaults_exclude_the_release_namespace_and_kube_system(helm: Helm) -> None:
    docs = documents(helm.render({"nri": {"enabled": True}}, namespace="gpu-sim"))
    args = find(docs, "DaemonSet", "mokka-test-nri")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert flags(args, "--excluded-namespaces") == ["gpu-sim,kube-system"]
    assert flags(args, "--namespaces") == [""]  # only pods annotated "true"
    assert flags(args, "--socket") == ["/var/run/nri/nri.sock"] and flags(args, "--devices") == ["all"]
