"""The images as they are shipped: `make images publish` into Debian's docker-registry on 127.0.0.1, then
pulled back into a second, empty storage and run with podman against the real consumers.

Needs root (apt-get installs buildah, podman, docker-registry, mmdebstrap the first time). Everything
lives under a temporary directory (both containers storages, the registry) but the base root filesystem,
cached under the consumer cache by tools/images.py.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
sys.path.insert(0, str(REPO / "charts" / "mokka" / "tests"))

import images as recipe  # noqa: E402  (tools/images.py: what make images builds)
from chartlib import consumer_cache, fetch_helm, missing_consumer  # noqa: E402

TOOLS = {"buildah": "buildah", "podman": "podman", "docker-registry": "docker-registry",
         "mmdebstrap": "mmdebstrap", "runc": "runc"}
GPU_NAME = "NVIDIA H100 80GB HBM3"  # reference/captures/qx-h100.xml <product_name>
H100_PCI = "[10de:2330]"  # H100 SXM5 80GB


def install_tools() -> None:
    from mokka_core.testing.consumers import ConsumerUnavailable, apt_install

    search = f"{os.environ.get('PATH', '')}:/usr/sbin"
    wanted = [package for binary, package in TOOLS.items() if shutil.which(binary, path=search) is None]
    if wanted:
        try:
            apt_install(wanted)
        except ConsumerUnavailable as exc:
            missing_consumer(str(exc))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def get(url: str, accept: str = "application/json") -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers={"Accept": accept})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return int(response.status), response.read()
    except urllib.error.HTTPError as error:
        return error.code, b""
    except OSError:
        return 0, b""


def storage(directory: Path) -> dict[str, str]:
    """The environment of a private containers storage (overlay: vfs copies every layer whole)."""
    directory.mkdir(parents=True)
    (directory / "storage.conf").write_text(
        f'[storage]\ndriver = "overlay"\ngraphroot = "{directory / "graph"}"\nrunroot = "{directory / "run"}"\n')
    # limits a container may set under this machine's own (podman's defaults ask for more than root may)
    (directory / "containers.conf").write_text(
        '[containers]\ndefault_ulimits = ["nofile=1024:4096", "nproc=4096:4096"]\n'
        '[engine]\nevents_logger = "file"\n')
    return {**os.environ, "CONTAINERS_STORAGE_CONF": str(directory / "storage.conf"),
            "CONTAINERS_CONF": str(directory / "containers.conf")}


@dataclass
class Published:
    registry: str
    helm: Path
    pulled: dict[str, str]  # environment of the storage the images were pulled into
    scratch: Path

    def ref(self, image: recipe.Image) -> str:
        return f"{self.registry}/{image.name}:{image.version}"

    def podman(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["podman", *args], env=self.pulled, capture_output=True, text=True, timeout=timeout)

    def run(self, image: recipe.Image, *args: str, volume: Path | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess[str]:
        mounts = ["--volume", f"{volume}:/node"] if volume is not None else []
        return self.podman("run", "--rm", "--network", "none", *mounts, self.ref(image), *args, timeout=timeout)


def image(name: str) -> recipe.Image:
    (found,) = [i for i in recipe.images() if i.name == name]
    return found


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Published]:
    if os.geteuid() != 0:
        pytest.skip("building and running images needs root")
    install_tools()
    try:
        helm = fetch_helm(consumer_cache())
    except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
        missing_consumer(f"helm could not be fetched: {exc}")
    scratch = tmp_path_factory.mktemp("images")
    built, pulled = storage(scratch / "built"), storage(scratch / "pulled")
    port = free_port()
    registry = f"127.0.0.1:{port}"
    (scratch / "registry.yml").write_text(yaml.safe_dump({
        "version": 0.1, "log": {"level": "warn"},
        "storage": {"filesystem": {"rootdirectory": str(scratch / "registry")}},
        "http": {"addr": registry}}))
    log = (scratch / "registry.log").open("w")
    server = subprocess.Popen([shutil.which("docker-registry") or "/usr/bin/docker-registry", "serve",
                               str(scratch / "registry.yml")], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while get(f"http://{registry}/v2/")[0] != 200:
            assert server.poll() is None and time.monotonic() < deadline, (scratch / "registry.log").read_text()
            time.sleep(0.2)
        made = subprocess.run(["make", "-C", str(REPO), "images", "publish", f"REGISTRY={registry}",
                               f"PY={sys.executable}", f"HELM={helm}"], env=built, capture_output=True, text=True,
                              timeout=1500)
        assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
        print(made.stdout)
        for each in recipe.images():
            ref = f"{registry}/{each.name}:{each.version}"
            pull = subprocess.run(["podman", "pull", "--quiet", "--tls-verify=false", ref], env=pulled,
                                  capture_output=True, text=True, timeout=600)
            assert pull.returncode == 0, pull.stderr
        yield Published(registry, helm, pulled, scratch)
        for env in (built, pulled):
            left = subprocess.run(["podman", "ps", "--all", "--quiet"], env=env, capture_output=True, text=True)
            assert left.stdout.strip() == "", f"containers left behind: {left.stdout}"
            working = subprocess.run(["buildah", "containers", "--quiet"], env=env, capture_output=True, text=True)
            assert working.stdout.strip() == "", f"buildah working containers left behind: {working.stdout}"
    finally:
        for env in (built, pulled):  # unmounts and removes every layer of the storage
            subprocess.run(["podman", "system", "reset", "--force"], env=env, capture_output=True, timeout=300)
        server.terminate()
        server.wait(timeout=30)
        log.close()
        shutil.rmtree(scratch, ignore_errors=True)


def test_catalog_holds_every_image_and_the_chart(published: Published) -> None:
    status, body = get(f"http://{published.registry}/v2/_catalog")
    assert status == 200
    names = {"mokka-node", *(f"mokka-sim-{s}" for s in recipe.SIMS), "charts/mokka"}
    assert set(json.loads(body)["repositories"]) == names
    assert len(names) == 9
    for each in recipe.images():
        status, body = get(f"http://{published.registry}/v2/{each.name}/tags/list")
        assert json.loads(body)["tags"] == [recipe.package_version(each.package)]


def test_pulled_chart_renders_images_that_exist(published: Published) -> None:
    into = published.scratch / "chart"
    into.mkdir()
    pulled = subprocess.run([str(published.helm), "pull", f"oci://{published.registry}/charts/mokka",
                             "--plain-http", "--destination", str(into)], capture_output=True, text=True,
                            env={**os.environ, "HELM_CONFIG_HOME": str(published.scratch / "helm")})
    assert pulled.returncode == 0, pulled.stderr
    (package,) = into.glob("mokka-*.tgz")
    with tarfile.open(package) as tar:
        chart = yaml.safe_load(tar.extractfile("mokka/Chart.yaml").read())  # type: ignore[union-attr]
    assert chart["appVersion"] == image("mokka-node").version == recipe.package_version("mokka-core")
    rendered = subprocess.run([str(published.helm), "template", "mokka", str(package), "--set",
                               f"images.node.registry={published.registry}", "--set", "allocationWatcher.enabled=true",
                               "--set", "nri.enabled=true"], capture_output=True, text=True)
    assert rendered.returncode == 0, rendered.stderr
    refs = {c["image"] for doc in yaml.safe_load_all(rendered.stdout) if doc and doc["kind"] == "DaemonSet"
            for c in doc["spec"]["template"]["spec"]["containers"]}
    assert refs == {published.ref(image("mokka-node"))}
    for ref in refs:
        name, tag = ref.removeprefix(f"{published.registry}/").split(":")
        status, _ = get(f"http://{published.registry}/v2/{name}/manifests/{tag}",
                        accept="application/vnd.oci.image.manifest.v1+json")
        assert status == 200, ref


def test_labels_and_users(published: Published) -> None:
    for each in recipe.images():
        inspected = published.podman("image", "inspect", published.ref(each))
        assert inspected.returncode == 0, inspected.stderr
        (config,) = json.loads(inspected.stdout)
        labels = config["Config"]["Labels"]
        assert labels["org.opencontainers.image.version"] == recipe.package_version(each.package)
        assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
        assert len(labels["org.opencontainers.image.revision"]) == 40
        assert config["Config"]["User"] == ("0:0" if each.name == "mokka-node" else "65532:65532")


def test_images_share_the_base_and_runtime_layers(published: Published) -> None:
    layers = {}
    for each in recipe.images():
        inspected = json.loads(published.podman("image", "inspect", published.ref(each)).stdout)[0]
        layers[each.name] = inspected["RootFS"]["Layers"]
    bottom = {tuple(found[:2]) for found in layers.values()}
    assert len(bottom) == 1 and all(len(found) == 3 for found in layers.values()), layers


def test_pulled_sim_pci_stages_for_the_real_lspci(published: Published, tmp_path: Path) -> None:
    from mokka_core.testing.consumers import apt_tool

    lspci = apt_tool("lspci", "pciutils")
    pci = image("mokka-sim-pci")
    helped = published.run(pci, "--help")
    assert helped.returncode == 0 and "stage" in helped.stdout, helped.stdout + helped.stderr
    node = tmp_path / "node"
    node.mkdir()
    os.chown(node, 65532, 65532)  # the surface images run as uid 65532
    staged = published.run(pci, "stage", "--root", "/node", "-p", "h100", volume=node)
    assert staged.returncode == 0, staged.stderr
    listed = subprocess.run([str(lspci), "-A", "linux-sysfs", "-O", f"sysfs.path={node}/sys/bus/pci", "-nn",
                             "-d", "10de:2330"], capture_output=True, text=True)
    assert listed.returncode == 0, listed.stderr
    gpus = listed.stdout.splitlines()
    assert len(gpus) == 8 and all(H100_PCI in line and "3D controller" in line for line in gpus), gpus
    removed = published.run(pci, "teardown", "--root", "/node", volume=node)
    assert removed.returncode == 0, removed.stderr
    assert [p for p in node.rglob("*") if not p.is_dir()] == []


NODE_SCRIPT = """
set -eu
mokka node up --root /node --profile h100 > /tmp/node.log 2>&1 &
tries=0
until mokka node status --root /node --ready > /dev/null 2>&1; do
    tries=$((tries + 1))
    if [ "$tries" -gt 300 ]; then echo "node never ready" >&2; cat /tmp/node.log >&2; exit 1; fi
    sleep 0.2
done
LD_LIBRARY_PATH=/node/usr/lib/x86_64-linux-gnu /node/usr/bin/nvidia-smi --query-gpu=name --format=csv,noheader
mokka node down --root /node > /dev/null
"""


def test_pulled_node_image_shows_and_serves_nvidia_smi(published: Published, tmp_path: Path) -> None:
    node_image = image("mokka-node")
    shown = published.run(node_image, "mokka", "show", "--profile", "h100")
    assert shown.returncode == 0, shown.stderr
    assert "H100" in shown.stdout
    node = tmp_path / "node"
    node.mkdir()
    served = published.run(node_image, "sh", "-c", NODE_SCRIPT, volume=node)
    assert served.returncode == 0, served.stdout + served.stderr
    assert served.stdout.splitlines() == [GPU_NAME] * 8
    assert [p for p in node.rglob("*") if not p.is_dir()] == [], "mokka node down leaves nothing"
