"""``mokka_core.Node``: staged in a private root and removed without residue; the ctl in-process; env; run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

import mokka_core
from mokka_core import CtlError, Node
from mokka_core.stage.native import native_dir
from mokka_core.stage.store import NodeStore
from mokka_core.testing import consumers, node_api

if native_dir() is None:
    pytest.skip("mock libnvidia-ml not built (make -C native install)", allow_module_level=True)


@pytest.fixture
def private_tmp(monkeypatch: pytest.MonkeyPatch):
    """Where nodes are staged, ours alone (the residue check); short, as a node's sockets need."""
    where = Path(tempfile.mkdtemp(prefix="mk-", dir=node_api.FAST_TMP if node_api.FAST_TMP.is_dir() else None))
    monkeypatch.setattr(node_api, "FAST_TMP", where)
    yield where
    shutil.rmtree(where)


@pytest.mark.usefixtures("whole_node")
def test_a_node_is_staged_in_a_private_root_and_leaves_nothing_behind(private_tmp: Path) -> None:
    with Node("t4", gpus=2) as node:
        root = node.root
        assert root.parent.parent == private_tmp
        assert (root / "proc/driver/nvidia/version").is_file()
        assert len(list((root / "dev").glob("nvidia[0-9]*"))) == 2
    assert list(private_tmp.iterdir()) == []
    with pytest.raises(mokka_core.errors.MokkaError, match="not staged"):
        node.root  # noqa: B018


def test_a_node_that_cannot_be_staged_leaves_nothing_behind(private_tmp: Path) -> None:
    with pytest.raises(mokka_core.errors.ConfigError, match="no-such-profile"):
        Node("no-such-profile").__enter__()
    assert list(private_tmp.iterdir()) == []


def test_unknown_surface_names_are_refused_naming_the_option() -> None:
    with pytest.raises(mokka_core.errors.ConfigError, match=r"--disable.*unknown surface 'gpx'"):
        Node("t4", disable=["gpx"])


@pytest.mark.parametrize("kwargs, named", [({"gpus": True}, r"gpus: a number of GPUs, got True"),
                                           ({"gpus": "2"}, r"gpus: a number of GPUs, got '2'"),
                                           ({"profile": ""}, r"profile: a built-in profile's name .* got ''")])
def test_a_spec_that_is_not_what_its_types_say_is_refused_naming_the_argument(kwargs: dict, named: str) -> None:
    """Node(gpus=True) staged 1 GPU and Node(profile="") an h100."""
    with pytest.raises(mokka_core.errors.ConfigError, match=named):
        Node(**kwargs)


def test_ctl_runs_the_command_line_in_process(private_tmp: Path) -> None:
    with Node("t4", gpus=2) as node:
        assert node.ctl("temp", "0", "91") == "ok: GPU 0 temperature 91 C"
        with pytest.raises(CtlError, match="out of range 0-200 C") as refused:
            node.ctl("temp", "0", "9999")
        assert refused.value.status == 1
        with pytest.raises(CtlError, match="invalid choice: 'tmp'") as usage:
            node.ctl("tmp", "0", "1")
        assert usage.value.status == 2
        assert "Pin the GPU temperature" in node.ctl("temp", "--help")
        gpus = json.loads(node.ctl("status", "--json"))["gpus"]
        assert gpus[0]["temperature_c"] == 91


def test_ctl_many_is_one_transaction_all_or_nothing(private_tmp: Path) -> None:
    with Node("t4", gpus=2) as node:
        message = node.ctl_many([("temp", "0", "70"), ("fail", "1", "fallen-off-bus"), ("power", "0", "50")])
        assert message.splitlines() == ["ok: GPU 0 temperature 70 C", "ok: GPU 1 fallen-off-bus",
                                        "ok: GPU 0 power draw 50 W"]
        gpus = json.loads(node.ctl("status", "--json"))["gpus"]
        assert (gpus[0]["temperature_c"], gpus[0]["power_w"], gpus[1]["health"]) == (70, 50.0, "fallen_off_bus")
        override = NodeStore(node.root).override_file
        before = override.read_text()
        with pytest.raises(CtlError, match="out of range"):
            node.ctl_many([("temp", "1", "40"), ("temp", "0", "9999")])
        assert override.read_text() == before
        assert json.loads(node.ctl("status", "--json"))["gpus"][1]["temperature_c"] != 40
        with pytest.raises(CtlError, match="batch"):
            node.ctl_many([("temp", "1", "40"), ("status",)])


@pytest.mark.usefixtures("whole_node")
def test_env_shows_two_nodes_to_real_nvidia_smi_at_once(private_tmp: Path) -> None:
    smi = consumers.require("nvidia-smi", version="550")
    with Node("t4", gpus=2) as t4, Node("a100") as a100:
        t4.ctl("temp", "1", "77")
        listed = {name: subprocess.run([str(smi), "--query-gpu=index,name,temperature.gpu", "--format=csv,noheader"],
                                       env=node.env, capture_output=True, text=True, timeout=60)
                  for name, node in (("t4", t4), ("a100", a100))}
    assert listed["t4"].returncode == 0, listed["t4"].stderr
    rows = [line.split(", ") for line in listed["t4"].stdout.splitlines()]
    assert [row[1] for row in rows] == ["Tesla T4", "Tesla T4"] and rows[1][2] == "77"
    a100_rows = listed["a100"].stdout.splitlines()
    assert len(a100_rows) == 8 and all("A100" in row for row in a100_rows), listed["a100"]


def test_env_points_the_ctl_at_the_node(private_tmp: Path) -> None:
    ctl = Path(os.sys.executable).with_name("nvml-mock-ctl")
    with Node("t4") as node:
        done = subprocess.run([str(ctl), "temp", "0", "66"], env=node.env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert "66C" in node.ctl("status")


@pytest.mark.usefixtures("whole_node")
def test_run_shows_the_node_at_the_real_paths(private_tmp: Path) -> None:
    if node_api.namespace.refusal() is not None:
        pytest.skip(f"no private mount namespace here: {node_api.namespace.refusal()}")
    with Node("t4", gpus=2) as node:
        done = node.run(["sh", "-c", "ls /dev | grep -c '^nvidia[0-9]'; cat /proc/driver/nvidia/version"],
                        capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "2" and "NVRM version" in done.stdout


def test_run_says_why_where_there_is_no_namespace(private_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(node_api.namespace, "refusal", lambda: "user namespaces are disabled")
    with Node("t4") as node, pytest.raises(mokka_core.errors.MokkaError,
                                           match="needs a private mount namespace, and user namespaces are disabled"):
        node.run(["true"])


def test_ctl_start_up_does_not_import_the_node_api() -> None:
    code = "import sys, mokka_core.ctl.cli, mokka_core; print('mokka_core.testing.node_api' in sys.modules)"
    done = subprocess.run([os.sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


@pytest.mark.usefixtures("whole_node")
def test_services_are_started_on_request_and_stopped_on_exit(private_tmp: Path) -> None:
    with Node("h100", gpus=2, services=True) as node:
        assert NodeStore(node.root).fabricmanager_ready.exists()  # nv-fabricmanager is up: the fabric trains
        pids = [process.pid for process in node._services.processes.values()]
        assert pids
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert list(private_tmp.iterdir()) == []


def test_without_services_nothing_is_started(private_tmp: Path) -> None:
    with Node("h100", gpus=2) as node:
        assert not NodeStore(node.root).fabricmanager_ready.exists()
