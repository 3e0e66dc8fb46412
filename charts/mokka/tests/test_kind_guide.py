"""docs/kind.md checked offline (tests/cluster runs its steps on a real node; kind itself needs Docker): every
file it names exists; the mokka values render and validate; the pod it applies validates; the kind config
turns CDI and NRI on; the images it names are the ones the chart and `make images` agree on."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from chartlib import CHART, REPO, Helm, documents, find
from test_render import kubernetes_validate

GUIDE = REPO / "docs" / "kind.md"
FILES = REPO / "docs" / "kind"


def commands() -> list[str]:
    """The guide's shell commands, continuation lines joined, comments dropped."""
    blocks = re.findall(r"```sh\n(.*?)```", GUIDE.read_text(), re.S)
    joined = re.sub(r"\\\n\s*", " ", "".join(blocks))
    return [line.split("#", 1)[0].strip() for line in joined.splitlines() if line.strip()]


def app_version() -> str:
    return str(yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"])


def test_every_file_the_guide_names_exists() -> None:
    named = set(re.findall(r"\b(docs/kind/[\w.-]+|charts/mokka(?:/[\w.-]+)*)", GUIDE.read_text()))
    assert {"docs/kind/cluster.yaml", "docs/kind/mokka-values.yaml", "docs/kind/device-plugin-values.yaml",
            "docs/kind/fgo-values.yaml", "docs/kind/gpu-pod.yaml"} <= named
    assert [path for path in sorted(named) if not (REPO / path).exists()] == []
    assert {f"docs/kind/{p.name}" for p in FILES.iterdir()} <= named, "a file in docs/kind/ the guide never uses"


def test_the_guide_says_what_runs_on_the_real_node_and_what_only_docker_runs() -> None:
    text = GUIDE.read_text()
    assert "Not run here" not in text
    assert "**Run on a real node by the tests.** `tests/cluster`" in text
    assert "What only a Docker host runs: kind itself" in text
    assert (REPO / "tests" / "cluster" / "test_guide.py").exists()


def test_the_device_plugin_release_is_the_one_the_cluster_tests_run() -> None:
    pinned = re.search(r"github.com/NVIDIA/k8s-device-plugin (v\S+)",
                       (REPO / "tests" / "k8s" / "deviceplugin" / "go.mod").read_text())
    assert pinned and f"--version {pinned.group(1).lstrip('v')}" in " ".join(commands())


def test_kind_config_enables_cdi_and_nri_and_labels_the_worker() -> None:
    config = yaml.safe_load((FILES / "cluster.yaml").read_text())
    assert config["kind"] == "Cluster" and config["apiVersion"] == "kind.x-k8s.io/v1alpha4"
    (worker,) = [n for n in config["nodes"] if n["role"] == "worker"]
    mokka = yaml.safe_load((FILES / "mokka-values.yaml").read_text())
    assert worker["labels"].items() >= mokka["nodeSelector"].items()
    patches = "\n".join(config["containerdConfigPatches"])
    assert re.search(r"enable_cdi\s*=\s*true", patches)
    cdi_dirs = re.search(r"cdi_spec_dirs\s*=\s*(\[.*\])", patches)
    assert cdi_dirs and yaml.safe_load((CHART / "values.yaml").read_text())["node"]["cdiSpecDir"] in cdi_dirs.group(1)
    nri = re.search(r'\[plugins\."io\.containerd\.nri\.v1\.nri"\]\s*\n\s*disable\s*=\s*false', patches)
    assert nri, patches
    socket = re.search(r'socket_path\s*=\s*"([^"]+)"', patches)
    assert socket and Path(socket.group(1)).parent == Path(mokka.get("nri", {}).get("socketDir", "/var/run/nri"))
    assert "kind create cluster --config docs/kind/cluster.yaml" in commands()
    assert f"kind load image-archive /tmp/mokka-node.tar --name {config['name']}" in commands()


def test_the_loaded_image_is_the_one_the_chart_runs(helm: Helm) -> None:
    node_image = f"localhost/mokka-node:{app_version()}"
    assert f"podman save --format docker-archive -o /tmp/mokka-node.tar {node_image}" in commands()
    rendered = documents(helm.render(yaml.safe_load((FILES / "mokka-values.yaml").read_text())))
    images = {c["image"] for d in rendered if d["kind"] == "DaemonSet"
              for c in d["spec"]["template"]["spec"]["containers"]}
    assert images == {node_image}
    pod = yaml.safe_load((FILES / "gpu-pod.yaml").read_text())
    assert pod["spec"]["containers"][0]["image"] == node_image


def test_mokka_values_render_and_validate(helm: Helm, tmp_path: Path) -> None:
    values = FILES / "mokka-values.yaml"
    install = [c for c in commands() if c.startswith("helm install mokka ")]
    assert install == ["helm install mokka charts/mokka -n mokka --create-namespace -f docs/kind/mokka-values.yaml"]
    result = helm.run("template", "mokka", "--namespace", "mokka", "-f", str(values))
    assert result.returncode == 0, result.stderr
    docs = documents(result.stdout)
    ds = find(docs, "DaemonSet", "mokka")
    assert ds["spec"]["template"]["spec"]["nodeSelector"] == {"mokka.dev/gpu": "h100"}
    assert yaml.safe_load(find(docs, "ConfigMap", "mokka-profile")["data"]["profile.yaml"])["name"] == "h100"
    fgo = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("gpu-profile-")]
    assert {d["metadata"]["namespace"] for d in fgo} == {"gpu-operator"}
    assert "kubectl create namespace gpu-operator" in commands()
    (tmp_path / "mokka.yaml").write_text(result.stdout)
    kubernetes_validate([tmp_path / "mokka.yaml", FILES / "gpu-pod.yaml"])


def test_the_pod_asks_for_two_of_the_eight_gpus_the_node_has() -> None:
    """Two of eight: the pod must see exactly its own (tests/cluster runs it on a real node)."""
    pod = yaml.safe_load((FILES / "gpu-pod.yaml").read_text())
    (smi,) = pod["spec"]["containers"]
    assert smi["resources"]["limits"] == {"nvidia.com/gpu": 2}
    profile = yaml.safe_load((CHART / "profiles" / "h100.yaml").read_text())
    assert len(profile["devices"]) == 8
    assert "kubectl apply -f docs/kind/gpu-pod.yaml" in commands()


def test_device_plugin_points_at_the_staged_driver_root() -> None:
    plugin = yaml.safe_load((FILES / "device-plugin-values.yaml").read_text())
    root = yaml.safe_load((CHART / "values.yaml").read_text())["node"]["root"]
    assert plugin["nvidiaDriverRoot"] == root
    assert plugin["gfd"]["enabled"] is True and plugin["deviceListStrategy"] == "cdi-cri"
    assert plugin["nodeSelector"] == yaml.safe_load((FILES / "mokka-values.yaml").read_text())["nodeSelector"]


def test_dra_driver_points_at_the_staged_driver_root_on_the_mokka_node() -> None:
    dra = yaml.safe_load((FILES / "dra-driver-values.yaml").read_text())
    mokka = yaml.safe_load((FILES / "mokka-values.yaml").read_text())
    assert dra["nvidiaDriverRoot"] == yaml.safe_load((CHART / "values.yaml").read_text())["node"]["root"]
    assert dra["kubeletPlugin"]["nodeSelector"] == mokka["nodeSelector"]
    assert dra["resources"]["gpus"]["enabled"] is True and dra["featureGates"]["NVMLDeviceHealthCheck"] is True
    assert "nvidia-dra-driver-gpu" in mokka["nri"]["sysfsNamespaces"]  # its plugin reads PCIe roots in sysfs


def test_fgo_pools_share_the_profile_mokka_seeds() -> None:
    fgo = yaml.safe_load((FILES / "fgo-values.yaml").read_text())
    assert fgo["builtinProfiles"]["enabled"] is False
    pools = fgo["topology"]["nodePools"]
    assert set(pools) == {"integration-pool", "scale-pool"}
    mokka = yaml.safe_load((FILES / "mokka-values.yaml").read_text())
    assert {p["gpuProfile"] for p in pools.values()} == {mokka["gpu"]["profile"]}
    assert pools["integration-pool"]["nodeSelector"] == mokka["nodeSelector"]
    assert mokka["integrations"]["fakeGpuOperator"]["targetNamespace"] == "gpu-operator"


def test_teardown_removes_everything_the_guide_creates() -> None:
    cmds = commands()
    installed = {m.group(1) for c in cmds for m in [re.match(r"helm install (\S+)", c)] if m}
    uninstalled = {m.group(1) for c in cmds for m in [re.match(r"helm uninstall (\S+)", c)] if m}
    assert installed == uninstalled == {"mokka", "nvdp", "fgo", "nvidia-dra-driver-gpu"}
    assert "kind delete cluster --name mokka" in cmds and "kubectl delete -f docs/kind/gpu-pod.yaml" in cmds
