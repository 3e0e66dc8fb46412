"""Fixtures: staged simulated nodes and their running responders."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mokka_core.testing import consumers
from mokka_sim_ib.testing import SimNode, stage_node, start_responder, stop_responder

PACKAGE_DIR = Path(__file__).resolve().parents[1]


@pytest.fixture
def fabric(tmp_path: Path) -> Iterator[Callable[..., SimNode]]:
    """A factory of served nodes sharing one fabric directory; all responders stop at the end."""
    started: list[SimNode] = []
    fabric_dir = tmp_path / "fabric"

    def make(name: str, **kwargs: object) -> SimNode:
        node = start_responder(stage_node(tmp_path / name, name, **kwargs), fabric_dir)  # type: ignore[arg-type]
        started.append(node)
        return node

    make.nodes = started  # type: ignore[attr-defined]
    yield make
    for node in started:
        stop_responder(node)


@pytest.fixture(scope="session")
def shim_built() -> Path:
    """Build and install the shim once per session (`make -C native install`), after Debian's verbs.h is installed
    (without it the shim is built without its verbs part)."""
    if shutil.which("make") is None or shutil.which(os.environ.get("CC", "gcc")) is None:
        pytest.skip("no C toolchain")
    install_ib_tools()
    result = subprocess.run(["make", "-s", "-C", str(PACKAGE_DIR / "native"), "install"], capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr
    return PACKAGE_DIR / "src/mokka_sim_ib/_native/libmokka-ib.so"


IB_PACKAGES = ["ibverbs-utils", "infiniband-diags", "ibverbs-providers", "libibverbs-dev"]
IB_TOOLS = [
    "ibstat", "ibstatus", "ibv_devices", "ibv_devinfo", "ibping", "sminfo", "iblinkinfo", "ibnetdiscover", "perfquery",
]


def install_ib_tools() -> None:
    """Debian's InfiniBand diagnostics and verbs tools (and verbs.h for the shim), as root via apt-get."""
    if all(shutil.which(t) for t in IB_TOOLS) and Path("/usr/include/infiniband/verbs.h").exists():
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return
    with contextlib.suppress(consumers.ConsumerUnavailable):  # the caller reports which tools are missing
        consumers.apt_install(IB_PACKAGES)


def can_mount_namespaces() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "mount", "-t", "tmpfs", "t", "/mnt"],
                           capture_output=True, timeout=30)
    return probe.returncode == 0


@pytest.fixture(scope="session")
def ib_tools(shim_built: Path) -> Path:
    """The real IB tools, a private mount namespace to show them a node, and the built shim."""
    from mokka_core.testing.consumers import missing

    install_ib_tools()
    absent = [t for t in IB_TOOLS if shutil.which(t) is None]
    if absent:
        missing(f"InfiniBand tools not installed: {', '.join(absent)} (apt-get install {' '.join(IB_PACKAGES)})")
    if not can_mount_namespaces():
        missing("needs root and unshare(1) for a private mount namespace")
    if not Path("/usr/include/infiniband/verbs.h").exists():
        missing("libibverbs-dev is needed to build the verbs part of the shim")
    # the shim was built before verbs.h may have been installed: rebuild to include the verbs part
    subprocess.run(["make", "-s", "-B", "-C", str(PACKAGE_DIR / "native"), "install"], check=True, capture_output=True)
    return shim_built
