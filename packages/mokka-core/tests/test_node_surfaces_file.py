"""The surfaces file (`mokka node up --surfaces-file`): its document, its place in the merge order, and a
running node following it in place when it is replaced as the kubelet replaces a ConfigMap file."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mokka_core.cli.mokka import app
from mokka_core.errors import ConfigError
from mokka_core.model.node import Node
from mokka_core.model.spec import NodeSpec, surface_settings
from mokka_core.node.runstate import RunState
from mokka_core.node.settings import NodeSettings
from mokka_core.node.status import node_status
from mokka_core.node.supervise import alive
from mokka_core.stage import nodefile
from mokka_core.stage.store import NodeStore
from mokka_core.stage.surface import Entry, File, StageContext, Surface
from mokka_core.testing.configmap import write_configmap_volume
from mokka_core.testing.runner import DaemonRunner, ServiceSurface
from mokka_core.testing.tree import tree_snapshot as snapshot
from mokka_core.testing.waiting import wait_for

HEALTHY = "version: 1\nsurfaces: {}\n"
PCI_FAILED_NO_FM = "version: 1\nsurfaces:\n  pci: {state: failed}\n  fabricmanager: {enabled: false}\n"
SICK = "surfaces: {pci: {state: sick}}\n"


def surfaces_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "surfaces.yaml"
    path.write_text(text)
    return path


def settings_of(spec: NodeSpec) -> dict[str, tuple[bool, str]]:
    return {name: (s.enabled, s.state) for name, s in spec.resolve().surfaces.items()}


# -- the document --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "problem"), [
    ("version: 1\nsurfaces: {pci: {state: dead}}\n",
     "surfaces.pci.state: Input should be 'healthy' or 'failed', got 'dead'"),
    ("surfaces: {ib: {enabled: maybe}}\n", "surfaces.ib.enabled: Input should be a valid boolean"),
    ("surfaces: {pci: {broken: true}}\n", "surfaces.pci.broken: unknown key"),
    ("surfaces: {nvswitch: {enabled: false}}\n", "surfaces.nvswitch: Input should be 'gpu', 'pci', 'cdi'"),
    ("version: 1\nsurfaces: {}\nextra: 1\n", "extra: unknown key"),
    ("version: 2\nsurfaces: {}\n", "version: Input should be less than or equal to 1, got 2"),
    ("surfaces: [pci]\n", "surfaces: Input should be a valid dictionary"),
])
def test_a_bad_document_names_the_file_the_key_and_the_value(tmp_path: Path, text: str, problem: str) -> None:
    path = surfaces_file(tmp_path, text)
    with pytest.raises(ConfigError) as raised:
        NodeSpec(profile="h100", gpus=1, surfaces_file=path).resolve()
    assert f"{path}: {problem}" in str(raised.value)


def test_a_missing_or_empty_file_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"{tmp_path}/gone.yaml: cannot read file")):
        NodeSpec(profile="h100", gpus=1, surfaces_file=tmp_path / "gone.yaml").resolve()
    with pytest.raises(ConfigError, match=re.escape(f"{tmp_path}/surfaces.yaml: file is empty")):
        NodeSpec(profile="h100", gpus=1, surfaces_file=surfaces_file(tmp_path, "")).resolve()


def test_the_file_sets_only_what_it_names(tmp_path: Path) -> None:
    spec = NodeSpec(profile="t4", gpus=1, surfaces_file=surfaces_file(tmp_path, "surfaces: {pci: {state: failed}}\n"))
    assert settings_of(spec) == {**settings_of(NodeSpec(profile="t4", gpus=1)), "pci": (True, "failed")}


# -- the merge order: the file < the command line < the override file ---------------------------------

def test_the_command_line_goes_over_the_file_and_the_override_over_both(tmp_path: Path) -> None:
    path = surfaces_file(tmp_path, "surfaces:\n  pci: {state: failed}\n  ib: {enabled: false}\n"
                                   "  imex: {state: failed}\n  nvlink: {state: failed}\n")
    cli = surface_settings(disabled=["nvlink"], failed=["ib"])
    spec = NodeSpec(profile="gb200", gpus=2, surfaces_file=path, surfaces=cli)
    got = settings_of(spec)
    assert got["pci"] == (True, "failed")  # the file alone
    assert got["ib"] == (False, "failed")  # the file's enabled: false, the command line's --fail
    assert got["nvlink"] == (False, "failed")  # the command line's --disable, the file's state
    override = tmp_path / "overrides.yaml"
    override.write_text("surfaces: {pci: {state: healthy}, ib: {enabled: true}}\n")
    got = settings_of(NodeSpec(profile="gb200", gpus=2, surfaces_file=path, surfaces=cli, override_file=override))
    assert got["pci"] == (True, "healthy") and got["ib"] == (True, "failed") and got["imex"] == (True, "failed")


def test_the_node_file_records_it_for_later_commands(tmp_path: Path) -> None:
    path = surfaces_file(tmp_path, "surfaces: {pci: {state: failed}}\n")
    root = tmp_path / "root"
    nodefile.save(root, NodeSpec(profile="h100", gpus=1, surfaces_file=path))
    later = nodefile.load(root)
    assert later.surfaces_file == path
    assert settings_of(later)["pci"] == (True, "failed")
    assert str(path) in later.fingerprints()


# -- a running node follows the file in place ----------------------------------------------------------

class StateSurface(Surface):
    """Renders its own settings, as the node has them, into one file."""

    name = "pci"

    def plan(self, node: Node, ctx: StageContext) -> list[Entry]:
        return [File("etc/mokka-state/pci", node.surfaces["pci"].state + "\n")]


def staged_state(root: Path) -> str | None:
    path = root / "etc/mokka-state/pci"
    return path.read_text().strip() if path.exists() else None


def sleeper(pid_dir: Path) -> int | None:
    path = pid_dir / "mokka-test-sleeper.pid"
    text = path.read_text().strip() if path.exists() else ""
    return int(text) if text else None


def status_json(root: Path) -> dict:  # type: ignore[type-arg]
    result = CliRunner().invoke(app, ["node", "status", "--root", str(root), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


@pytest.mark.e2e  # a real supervisord
def test_a_kubelet_style_update_is_rendered_in_place_services_included(root: Path, tmp_path: Path, caplog) -> None:
    before = snapshot(root)
    config = tmp_path / "etc-mokka"  # the pod's /etc/mokka
    write_configmap_volume(config, {"profile.yaml": "unused\n", "surfaces.yaml": HEALTHY})
    assert os.readlink(config / "surfaces.yaml") == "..data/surfaces.yaml"  # never replaced itself
    pid_dir = tmp_path / "pids"
    spec = NodeSpec(profile="h100", gpus=2, surfaces_file=config / "surfaces.yaml")
    surfaces = {"fabricmanager": ServiceSurface(pid_dir), "pci": StateSurface()}
    with DaemonRunner(NodeSettings(root=root, spec=spec), surfaces) as runner:
        wait_for(lambda: sleeper(pid_dir) is not None, what="the fabricmanager surface's service started")
        first = sleeper(pid_dir)
        assert first is not None and staged_state(root) == "healthy"
        (pid_dir / "mokka-test-sleeper.pid").unlink()

        write_configmap_volume(config, {"profile.yaml": "unused\n", "surfaces.yaml": PCI_FAILED_NO_FM})
        wait_for(lambda: staged_state(root) == "failed", what="pci restaged failed")
        wait_for(lambda: not alive(first), what="the service stopped with its surface")
        assert not (root / "etc/mokka-service/enabled").exists()
        wait_for(lambda: node_status(root)["surfaces"]["fabricmanager"]["services"] == {}, what="the change recorded")
        status = status_json(root)
        assert status["surfaces"]["pci"] == {"enabled": True, "state": "failed", "staged": True, "services": {}}
        assert status["surfaces"]["fabricmanager"] == {"enabled": False, "state": "healthy", "staged": False,
                                                       "services": {}}
        assert status["ready"] is True

        write_configmap_volume(config, {"profile.yaml": "unused\n", "surfaces.yaml": SICK})
        wait_for(lambda: "change not applied" in caplog.text, what="the bad file logged")
        assert "surfaces.yaml: surfaces.pci.state: Input should be 'healthy' or 'failed', got 'sick'" in caplog.text
        assert staged_state(root) == "failed" and runner.running  # its last good state

        write_configmap_volume(config, {"profile.yaml": "unused\n", "surfaces.yaml": HEALTHY})
        wait_for(lambda: staged_state(root) == "healthy", what="pci restaged healthy")
        wait_for(lambda: sleeper(pid_dir) is not None, what="the service started again")
        second = sleeper(pid_dir)
        assert second is not None and second != first and alive(second)
        wait_for(lambda: node_status(root)["ready"], what="ready again")
        assert status_json(root)["surfaces"]["fabricmanager"]["services"] == {"mokka-test-sleeper": "RUNNING"}
    assert not alive(second)
    assert snapshot(root) == before


@pytest.mark.e2e  # `mokka node up` as a process, at rest
def test_the_daemon_at_rest_wakes_for_a_kubelet_style_update(root: Path, tmp_path: Path) -> None:
    config = tmp_path / "etc-mokka"
    write_configmap_volume(config, {"surfaces.yaml": HEALTHY})
    path = config / "surfaces.yaml"
    mokka = Path(sys.executable).with_name("mokka")
    with open(tmp_path / "out.log", "w") as out:
        daemon = subprocess.Popen([str(mokka), "node", "up", "--profile", "h100", "--gpus", "1", "--root", str(root),
                                   "--surfaces-file", str(path), "--rest-after", "0.5"],
                                  stdout=out, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: (state := RunState.load(root)) is not None and state.resting, timeout=60,
                 what="the daemon at rest")
        write_configmap_volume(config, {"surfaces.yaml": PCI_FAILED_NO_FM})
        wait_for(lambda: f"{path} changed" in (tmp_path / "out.log").read_text(), what="woken for the file")
        wait_for(lambda: "re-rendered" in (tmp_path / "out.log").read_text().split(f"{path} changed")[1],
                 what="the change rendered")
        assert json.loads(NodeStore(root).snapshot.read_text())["inputs"][str(path)] == [
            path.stat().st_ino, path.stat().st_size, path.stat().st_mtime_ns]
        assert node_status(root)["surfaces"]["pci"]["state"] == "failed"
    finally:
        daemon.terminate()
        assert daemon.wait(60) == 0, (tmp_path / "out.log").read_text()
