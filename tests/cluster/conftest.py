"""Fixtures of the cluster tests: a real single-node Kubernetes built from pinned releases, the images imported into
its containerd, helm, and the host put back as it was after (a difference fails the session).

Needs root (CI runs as root); without it, or without a consumer the tests build, they skip, and fail under
MOKKA_REQUIRE_CONSUMERS=1.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))  # --import-mode=importlib: make the harness modules importable
sys.path.insert(0, str(REPO / "charts" / "mokka" / "tests"))

import host  # noqa: E402
from binaries import Binaries, build_all, pinned  # noqa: E402
from chartlib import fetch_helm  # noqa: E402
from guide import Releases  # noqa: E402
from node import HOST_PATHS, KubeNode  # noqa: E402
from node_images import (  # noqa: E402
    device_plugin_image,
    import_images,
    nfd_image,
    make_images,
    pause_archive,
    storage_env,
)

import dra  # noqa: E402

from mokka_core.testing.consumers import (  # noqa: E402
    apt_tool,
    cache_dir,
    go_module_source,
    missing,
    shared_binary,
)

DEVICE_PLUGIN_MODULE = REPO / "tests" / "k8s" / "deviceplugin"
NFD_MODULE = REPO / "tests" / "k8s" / "nfd"
NODE_LABELS = {"mokka.dev/gpu": "h100"}  # docs/kind/cluster.yaml labels its worker so


@pytest.fixture(scope="session")
def host_state() -> Iterator[host.HostState]:
    """The host as it was; restored after the session, and any difference left is an error of the session."""
    if os.geteuid() != 0:
        missing("a Kubernetes node needs root (CI runs as root)")
    before = host.snapshot(HOST_PATHS)
    yield before
    host.restore(before)
    left = host.differences(before)
    assert not left, "the cluster left the host changed:\n" + "\n".join(left)


@pytest.fixture(scope="session")
def binaries(host_state: host.HostState) -> Binaries:
    return build_all()


@pytest.fixture(scope="session")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cluster")


@pytest.fixture(scope="session")
def kube(binaries: Binaries, scratch: Path) -> Iterator[KubeNode]:
    node = KubeNode(binaries, scratch / "node", labels=NODE_LABELS)
    try:
        node.start()
        node.ctr("images", "import", str(pause_archive(binaries.pause, scratch)))
        yield node
    except (RuntimeError, TimeoutError) as exc:
        logs = "\n".join(f"--- {p.name}\n{p.tail(15)}" for p in node.processes)
        pytest.fail(f"the cluster did not start: {exc}\n{logs}", pytrace=False)
    finally:
        node.stop()


@pytest.fixture(scope="session")
def container_toolkit(binaries: Binaries, host_state: host.HostState) -> None:
    """nvidia-ctk and nvidia-cdi-hook at /usr/bin, as the NVIDIA Container Toolkit installs them on a GPU node
    (the device plugin's CDI spec runs its hooks from there). Removed with the rest of the host's changes."""
    for name, program in (("nvidia-ctk", binaries.nvidia_ctk), ("nvidia-cdi-hook", binaries.nvidia_cdi_hook)):
        target = Path("/usr/bin") / name
        if not target.exists():
            target.write_bytes(program.read_bytes())
            target.chmod(0o755)


@pytest.fixture(scope="session")
def storage(scratch: Path) -> Iterator[dict[str, str]]:
    """A private containers storage for every buildah and podman call of the session (the tools installed with
    apt-get when missing, as `make images` needs them)."""
    for program, package in (("buildah", "buildah"), ("podman", "podman"), ("mmdebstrap", "mmdebstrap")):
        apt_tool(program, package)
    env = storage_env(scratch / "containers")
    os.environ["CONTAINERS_STORAGE_CONF"] = env["CONTAINERS_STORAGE_CONF"]
    yield env
    subprocess.run(["buildah", "rm", "--all"], env=env, capture_output=True, timeout=300)
    subprocess.run(["podman", "system", "reset", "--force"], env=env, capture_output=True, timeout=300)
    del os.environ["CONTAINERS_STORAGE_CONF"]


@pytest.fixture(scope="session")
def images(kube: KubeNode, binaries: Binaries, storage: dict[str, str], scratch: Path) -> dict[str, str]:
    """Mokka's images (`make images`), the device plugin's and node-feature-discovery's, imported into the node's
    containerd: reference by image name (mokka-node, mokka-sim-pci, ...), and "node", "device-plugin" and "nfd"."""
    built = make_images(sys.executable, storage)
    plugin = device_plugin_image(binaries, pinned(DEVICE_PLUGIN_MODULE, "github.com/NVIDIA/k8s-device-plugin"))
    nfd = nfd_image(binaries, pinned(NFD_MODULE, "sigs.k8s.io/node-feature-discovery"))
    import_images(kube, [*built, plugin, nfd], storage, scratch)
    return {**{reference.split("/")[1].split(":")[0]: reference for reference in built},
            "node": built[0], "device-plugin": plugin, "nfd": nfd}


@pytest.fixture(scope="session")
def dra_image(kube: KubeNode, images: dict[str, str], storage: dict[str, str], scratch: Path) -> str:
    """The DRA driver's image (its release's programs from the shared binaries), imported into the node."""
    reference = dra.image({name: shared_binary(name) for name in dra.PROGRAMS})
    import_images(kube, [reference], storage, scratch)
    return reference


@pytest.fixture(scope="session")
def helm(kube: KubeNode, scratch: Path) -> list[str]:
    """The helm command line against the node (helm v3 from the chart tests' cache)."""
    binary = fetch_helm(cache_dir())
    home = scratch / "helm"
    for name in ("cache", "config", "data"):
        (home / name).mkdir(parents=True, exist_ok=True)
        kube.env[f"HELM_{name.upper()}_HOME"] = str(home / name)
    return [str(binary), "--kubeconfig", str(kube.kubeconfig)]


@pytest.fixture(scope="session")
def releases(kube: KubeNode, images: dict[str, str], helm: list[str], container_toolkit: None) -> Releases:
    """helm and the guide's releases on the node (the device plugin's chart from its pinned release's source)."""
    source = go_module_source(DEVICE_PLUGIN_MODULE, "github.com/NVIDIA/k8s-device-plugin")
    return Releases(kube, helm, source / "deployments" / "helm" / "nvidia-device-plugin", images["device-plugin"],
                    images["nfd"])
