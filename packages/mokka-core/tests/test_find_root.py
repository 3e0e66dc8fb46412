"""Which root a command acts on: never the host's / unless asked for or a node is staged there."""

from __future__ import annotations

from pathlib import Path

import pytest

from mokka_core.errors import MokkaError
from mokka_core.stage import paths
from mokka_core.stage.store import NodeStore


@pytest.fixture
def nowhere(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.delenv("MOKKA_ROOT", raising=False)
    monkeypatch.setattr(paths, "CLUSTER_ROOT", tmp_path / "cluster")
    if NodeStore(Path("/")).node_file.exists():
        pytest.skip("this machine has a node staged at /")
    return tmp_path


def test_explicit_then_env_then_cluster_root(nowhere: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert paths.find_root(Path("/")) == Path("/")  # asked for
    monkeypatch.setenv("MOKKA_ROOT", str(nowhere / "env"))
    assert paths.find_root() == nowhere / "env"
    monkeypatch.delenv("MOKKA_ROOT")
    NodeStore(paths.CLUSTER_ROOT).node_file.parent.mkdir(parents=True)
    NodeStore(paths.CLUSTER_ROOT).node_file.write_text("{}")
    assert paths.find_root() == paths.CLUSTER_ROOT == paths.find_root(creates=True)


@pytest.mark.parametrize("creates", [False, True])
def test_no_root_is_refused_never_the_host(nowhere: Path, creates: bool) -> None:
    with pytest.raises(MokkaError, match="no node root: give --root DIR"):
        paths.find_root(creates=creates)


def test_the_commands_refuse_without_a_root(nowhere: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from mokka_core.ctl.cli import execute

    assert execute(["temp", "0", "50"]) == 1
    assert "no node root" in capsys.readouterr().err
