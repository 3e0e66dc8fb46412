"""Fixtures for the pci surface tests: resolved nodes, staged roots, and the real lspci."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mokka_core.spec import NodeSpec
from mokka_core.staging import stage_wave, teardown
from mokka_core.state import NodeState
from mokka_core.surface import StageContext
from mokka_core.testing.consumers import missing
from mokka_sim_pci.surface import PciSurface


def resolve_node(profile: str, gpus: int | None = None, **surfaces: dict[str, object]) -> NodeState:
    return NodeSpec(profile=profile, gpus=gpus, surfaces=dict(surfaces)).resolve()


def apt_tool(binary: str, package: str) -> Path:
    """A tool from a Debian package: found on PATH, else installed with apt-get when root."""
    found = shutil.which(binary) or shutil.which(binary, path="/usr/sbin:/sbin:/usr/bin")
    if found:
        return Path(found)
    if os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "-qq", "update"], env=env, capture_output=True, check=False)
        subprocess.run(["apt-get", "-qq", "install", "-y", "--no-install-recommends", package],
                       env=env, capture_output=True, check=False)
        found = shutil.which(binary) or shutil.which(binary, path="/usr/sbin:/sbin:/usr/bin")
        if found:
            return Path(found)
    missing(f"{binary} (Debian package {package}) is not installed and cannot be installed here")


@pytest.fixture(scope="session")
def lspci_bin() -> Path:
    return apt_tool("lspci", "pciutils")


@pytest.fixture
def staged(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """Stage the pci surface of a node under a fresh root; tear everything down afterwards."""
    roots: list[Path] = []

    def stage(profile: str, gpus: int | None = None, **surfaces: dict[str, object]) -> Path:
        root = tmp_path / f"root{len(roots)}"
        state = resolve_node(profile, gpus, **surfaces)
        stage_wave({"pci": PciSurface().plan(state, StageContext(root=root))}, root)
        roots.append(root)
        return root

    yield stage
    for root in roots:
        teardown(root, "pci")


@pytest.fixture
def make_node() -> Callable[..., NodeState]:
    return resolve_node


@pytest.fixture
def lspci(lspci_bin: Path) -> Callable[..., str]:
    """Run the real lspci against a staged root through its relocatable sysfs backend."""

    def run(root: Path, *args: str) -> str:
        result = subprocess.run(
            [str(lspci_bin), "-A", "linux-sysfs", "-O", f"sysfs.path={root}/sys/bus/pci", *args],
            capture_output=True, text=True, check=True,
        )
        return result.stdout

    return run
