"""Fixtures for the pci surface tests: resolved nodes, staged roots, and the real lspci."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mokka_core.model.node import Node
from mokka_core.model.spec import NodeSpec
from mokka_core.stage.staging import stage_wave, teardown
from mokka_core.stage.surface import StageContext
from mokka_core.testing import consumers
from mokka_sim_pci.surface import PciSurface


def resolve_node(profile: str, gpus: int | None = None, host_cpus: str | None = None,
                 **surfaces: dict[str, object]) -> Node:
    return NodeSpec(profile=profile, gpus=gpus, surfaces=dict(surfaces), host_cpus=host_cpus).resolve()


def apt_tool(binary: str, package: str) -> Path:
    """A tool from a Debian package: found on PATH, else installed with apt-get when root."""
    return consumers.apt_tool(binary, package)


@pytest.fixture(scope="session")
def lspci_bin() -> Path:
    return apt_tool("lspci", "pciutils")


@pytest.fixture
def staged(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """Stage the pci surface of a node under a fresh root; tear everything down afterwards."""
    roots: list[Path] = []

    def stage(profile: str, gpus: int | None = None, host_cpus: str | None = None,
              **surfaces: dict[str, object]) -> Path:
        root = tmp_path / f"root{len(roots)}"
        state = resolve_node(profile, gpus, host_cpus, **surfaces)
        stage_wave({"pci": PciSurface().plan(state, StageContext(root=root))}, root)
        roots.append(root)
        return root

    yield stage
    for root in roots:
        teardown(root, "pci")


@pytest.fixture
def make_node() -> Callable[..., Node]:
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
