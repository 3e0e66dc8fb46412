"""``mokka node up --cdi-spec-dir``: the host's CDI directory gets a link to the spec staged under the root."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mokka_core.errors import MokkaError
from mokka_core.node import cdi_link


def test_link_points_at_the_staged_spec_and_goes_at_teardown(tmp_path: Path) -> None:
    root, host = tmp_path / "root", tmp_path / "cdi"
    (root / "var/run/cdi").mkdir(parents=True)
    (root / "var/run/cdi/nvidia.yaml").write_text("kind: nvidia.com/gpu\n")
    host.mkdir()
    link = cdi_link.make(host, root)
    assert link == host / "nvidia.yaml" and os.readlink(link) == f"{root}/var/run/cdi/nvidia.yaml"
    assert link.read_text() == "kind: nvidia.com/gpu\n"
    assert cdi_link.make(host, root) == link  # a link a killed daemon left is this node's: replaced
    assert cdi_link.remove(link, root) and sorted(host.iterdir()) == []


def test_a_spec_of_someone_else_is_never_replaced_or_removed(tmp_path: Path) -> None:
    root, host = tmp_path / "root", tmp_path / "cdi"
    host.mkdir()
    (host / "nvidia.yaml").write_text("kind: nvidia.com/gpu  # nvidia-ctk cdi generate\n")
    with pytest.raises(MokkaError, match=r"nvidia.yaml: exists and is not this node's CDI spec link"):
        cdi_link.make(host, root)
    assert cdi_link.remove(host / "nvidia.yaml", root)
    assert (host / "nvidia.yaml").read_text().startswith("kind: nvidia.com/gpu")
    assert sorted(p.name for p in host.iterdir()) == ["nvidia.yaml"]  # no temporary link left either


def test_an_unwritable_directory_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(MokkaError, match=rf"{tmp_path}/absent/nvidia.yaml: cannot link the node's CDI spec"):
        cdi_link.make(tmp_path / "absent", tmp_path / "root")
