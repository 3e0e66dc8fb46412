"""Fixtures of the Kubernetes consumer tests: the pinned Go consumers, built once into the consumer cache,
each run inside ``mokka run --profile P`` (a private mount namespace: needs root, as in CI)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # --import-mode=importlib: make boards importable

from mokka_core.stage.surface import discover
from mokka_core.testing.consumers import go_module_program, go_module_source, required

HERE = Path(__file__).resolve().parent
SURFACES_NEEDED = ("gpu", "pci")


def mokka_run(profile: str | Path, *command: str, timeout: float = 300, env: dict[str, str] | None = None,
              options: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """``mokka run --profile PROFILE [OPTIONS] -- COMMAND`` (a Path: ``--profile-file``), output captured."""
    chosen = ["--profile-file", str(profile)] if isinstance(profile, Path) else ["--profile", profile]
    return subprocess.run([sys.executable, "-m", "mokka_core", "run", *chosen, *options, "--", *command],
                          capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="session")
def real_node() -> None:
    """``mokka run`` shows a node at the real paths: root and the installed gpu and pci surfaces."""
    if os.geteuid() != 0:
        if required():
            pytest.fail("mount namespaces need root (CI runs as root)")
        pytest.skip("mount namespaces need root (CI runs as root)")
    absent = [name for name in SURFACES_NEEDED if name not in discover()]
    if absent:
        pytest.fail(f"surface packages not installed: {', '.join(absent)} (tox -e k8s installs them all)")


@pytest.fixture(scope="session")
def gonvml(real_node: None) -> Path:
    """Our go-nvml program (gonvml/main.go, go-nvml pinned in gonvml/go.mod)."""
    return go_module_program(HERE / "gonvml", ".", "gonvml")


@pytest.fixture(scope="session")
def nfd_worker(real_node: None) -> Path:
    """nfd-worker of the release pinned in nfd/go.mod, built as shipped."""
    return go_module_program(HERE / "nfd", "sigs.k8s.io/node-feature-discovery/cmd/nfd-worker", "nfd-worker")


@pytest.fixture(scope="session")
def gonvlib(real_node: None) -> Path:
    """Our go-nvlib program (gonvlib/main.go, go-nvlib and go-nvml pinned in gonvlib/go.mod)."""
    return go_module_program(HERE / "gonvlib", ".", "gonvlib")


@pytest.fixture(scope="session")
def gfd(real_node: None) -> Path:
    """gpu-feature-discovery of the k8s-device-plugin release pinned in deviceplugin/go.mod, built as shipped."""
    return go_module_program(HERE / "deviceplugin", "github.com/NVIDIA/k8s-device-plugin/cmd/gpu-feature-discovery",
                             "gpu-feature-discovery")


@pytest.fixture(scope="session")
def nvidia_ctk(real_node: None) -> Path:
    """nvidia-ctk of the NVIDIA Container Toolkit release pinned in toolkit/go.mod, built as shipped."""
    return go_module_program(HERE / "toolkit", "github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-ctk",
                             "nvidia-ctk")


@pytest.fixture(scope="session")
def device_plugin(real_node: None) -> Path:
    """nvidia-device-plugin of the k8s-device-plugin release pinned in deviceplugin/go.mod, built as shipped."""
    return go_module_program(HERE / "deviceplugin", "github.com/NVIDIA/k8s-device-plugin/cmd/nvidia-device-plugin",
                             "nvidia-device-plugin")


@pytest.fixture(scope="session")
def dpclient(real_node: None) -> Path:
    """Our kubelet side of the device-plugin v1beta1 API (dpclient/main.go, kubelet and grpc pinned in its go.mod)."""
    return go_module_program(HERE / "dpclient", ".", "dpclient")


@pytest.fixture(scope="session")
def mig_parted(real_node: None) -> Path:
    """nvidia-mig-parted of the release pinned in migparted/go.mod, built as shipped."""
    return go_module_program(HERE / "migparted", "github.com/NVIDIA/mig-parted/cmd/nvidia-mig-parted",
                             "nvidia-mig-parted")


@pytest.fixture(scope="session")
def mig_parted_configs(mig_parted: Path) -> Path:
    """The MIG configurations that release ships for every supported GPU (its systemd config-default.yaml)."""
    source = go_module_source(HERE / "migparted", "github.com/NVIDIA/mig-parted")
    return source / "deployments/systemd/config-default.yaml"
