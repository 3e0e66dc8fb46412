"""The node daemon in-process: all-or-nothing start, re-render exactly what changed, clean teardown."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from mokka_core.model.spec import NodeSpec
from mokka_core.node.daemon import run
from mokka_core.node.runstate import RunState
from mokka_core.node.settings import NodeSettings
from mokka_core.stage import nodefile
from mokka_core.stage import snapshot as node_snapshot
from mokka_core.stage.staging import StagingError, staged_surfaces
from mokka_core.stage.store import NODE_FILE, OVERRIDE_FILE
from mokka_core.testing.runner import (
    PROBE_FILE,
    BrokenSurface,
    DaemonRunner,
    ProbeSurface,
    SlowSurface,
    StaticSurface,
)
from mokka_core.testing.tree import tree_snapshot as snapshot
from mokka_core.testing.waiting import wait_for


def settings(root: Path, **kw) -> NodeSettings:
    kw.setdefault("spec", NodeSpec(profile="h100", gpus=4))
    return NodeSettings(root=root, supervise=False, **kw)


def probe(root: Path) -> dict:
    return json.loads((root / PROBE_FILE).read_text())


def test_up_publishes_every_surface_and_stop_leaves_no_residue(root: Path) -> None:
    before = snapshot(root)
    with DaemonRunner(settings(root), {"probe": ProbeSurface(), "static": StaticSurface()}) as runner:
        assert probe(root)["gpus"]["3"]["temperature_c"] is not None
        assert (root / "etc/mokka-static/driver").exists()
        assert nodefile.load(root).gpus == 4
        assert sorted(staged_surfaces(root)) == ["probe", "static"]
        assert RunState.load(root).phase == "ready"
        seconds = runner.stop()
    assert runner.exception is None
    assert seconds < 2
    assert snapshot(root) == before


def test_a_surface_that_raises_while_planning_publishes_nothing(root: Path) -> None:
    before = snapshot(root)
    stop = threading.Event()
    with pytest.raises(StagingError, match="surface broken: plan failed: RuntimeError: deliberately broken"):
        run(settings(root), stop, threading.Event(),
            {"probe": ProbeSurface(), "broken": BrokenSurface(), "static": StaticSurface()})
    assert snapshot(root) == before


def test_override_change_restages_exactly_the_surfaces_whose_plan_changed(root: Path) -> None:
    with DaemonRunner(settings(root), {"probe": ProbeSurface(), "static": StaticSurface()}):
        static_inode = (root / "etc/mokka-static/driver").stat().st_ino
        (root / OVERRIDE_FILE).write_text("version: 1\ndevices:\n  '2': {thermal: {temperature_gpu_c: 91}}\n")
        wait_for(lambda: probe(root)["gpus"]["2"]["temperature_c"] == 91)
        assert probe(root)["gpus"]["1"]["temperature_c"] != 91
        assert (root / "etc/mokka-static/driver").stat().st_ino == static_inode
        assert set(node_snapshot.digests(root)) == {"probe", "static"}


def test_profile_file_change_is_rendered(root: Path, write_profile) -> None:
    profile = write_profile()
    spec = NodeSpec(profile_file=profile, gpus=2)
    with DaemonRunner(settings(root, spec=spec), {"probe": ProbeSurface()}):
        profile.write_text(profile.read_text().replace("temperature_gpu_c: 34", "temperature_gpu_c: 55"))
        wait_for(lambda: probe(root)["gpus"]["0"]["temperature_c"] == 55)


def test_a_bad_override_keeps_the_last_good_state(root: Path, caplog) -> None:
    with DaemonRunner(settings(root), {"probe": ProbeSurface()}) as runner:
        (root / OVERRIDE_FILE).write_text("devices:\n  '0': {thermal: {temperature_gpu_c: 9999}}\n")
        wait_for(lambda: "change not applied" in caplog.text)
        assert probe(root)["gpus"]["0"]["temperature_c"] != 9999
        (root / OVERRIDE_FILE).write_text("devices:\n  '0': {thermal: {temperature_gpu_c: 77}}\n")
        wait_for(lambda: probe(root)["gpus"]["0"]["temperature_c"] == 77)
        assert runner.running


def test_a_deeply_nested_override_keeps_the_last_good_state(root: Path, caplog) -> None:
    """A 2 KB override nested 1000 levels deep killed the daemon (RecursionError) and tore the node down."""
    with DaemonRunner(settings(root), {"probe": ProbeSurface()}) as runner:
        (root / OVERRIDE_FILE).write_text("devices: " + "[" * 1000 + "]" * 1000 + "\n")
        wait_for(lambda: "change not applied" in caplog.text)
        assert "levels deep" in caplog.text and runner.running
        (root / OVERRIDE_FILE).write_text("devices:\n  '0': {thermal: {temperature_gpu_c: 77}}\n")
        wait_for(lambda: probe(root)["gpus"]["0"]["temperature_c"] == 77)
        assert runner.running


def test_any_exception_while_rerendering_keeps_the_last_good_node(root: Path, caplog, monkeypatch) -> None:
    """Not only a MokkaError: an OSError (a full disk while recording) leaves the node up as it was."""
    with DaemonRunner(settings(root), {"probe": ProbeSurface()}) as runner:
        def full_disk(*args, **kwargs):  # type: ignore[no-untyped-def]
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(node_snapshot, "save", full_disk)
        (root / OVERRIDE_FILE).write_text("devices:\n  '0': {thermal: {temperature_gpu_c: 77}}\n")
        wait_for(lambda: "change not applied" in caplog.text)
        assert "No space left" in caplog.text
        time.sleep(0.2)
        assert runner.running


def test_stop_while_staging_publishes_nothing_and_cleans_up(root: Path) -> None:
    before = snapshot(root)
    slow = SlowSurface(delay=1.0)
    runner = DaemonRunner(settings(root), {"probe": ProbeSurface(), "slow": slow}, expect_ready=False)
    with runner:
        assert slow.started.wait(5)
        runner.stop()
    assert runner.exception is None and not runner.ready_flag.is_set()
    assert snapshot(root) == before


def test_a_second_daemon_on_the_same_root_is_refused(root: Path) -> None:
    with DaemonRunner(settings(root), {"probe": ProbeSurface()}):
        with pytest.raises(Exception, match="already runs under"):
            run(settings(root), threading.Event(), None, {"probe": ProbeSurface()})
        assert (root / NODE_FILE).exists()  # the refused one removed nothing


def test_disabling_a_surface_by_override_tears_it_down(root: Path) -> None:
    spec = NodeSpec(profile="h100", gpus=2)
    with DaemonRunner(settings(root, spec=spec), {"probe": ProbeSurface(), "ib": StaticSurface()}):
        assert (root / "etc/mokka-static/driver").exists()
        (root / OVERRIDE_FILE).write_text("surfaces: {ib: {enabled: false}}\n")
        wait_for(lambda: not (root / "etc/mokka-static/driver").exists())
        wait_for(lambda: staged_surfaces(root) == ["probe"])  # its manifest goes right after its files


class TwoFileSurface(StaticSurface):
    name = "two"

    def plan(self, node, ctx):
        from mokka_core.stage.surface import File

        return [File("etc/two/fixed", "same\n"),
                File("etc/two/temp", f"{node.gpus[0].config.thermal.temperature_gpu_c}\n")]


def test_a_restage_replaces_only_the_files_that_changed(root: Path) -> None:
    with DaemonRunner(settings(root), {"two": TwoFileSurface()}):
        fixed, temp = root / "etc/two/fixed", root / "etc/two/temp"
        fixed_inode, temp_inode = fixed.stat().st_ino, temp.stat().st_ino
        (root / OVERRIDE_FILE).write_text("devices:\n  '0': {thermal: {temperature_gpu_c: 66}}\n")
        wait_for(lambda: temp.read_text() == "66\n")
        assert fixed.stat().st_ino == fixed_inode and temp.stat().st_ino != temp_inode


def test_watchdogs_stop_race_line_is_not_shown(tmp_path: Path) -> None:
    """bench_node showed 'InotifyEmitter.queue_events() called when the thread is inactive' at a node's stop."""
    import logging
    import threading

    from mokka_core.node import daemon

    observer = daemon._observe([tmp_path / "profile.yaml"], threading.Event())
    observer.stop()
    observer.join(timeout=5)
    inotify = logging.getLogger("watchdog.observers.inotify")
    race = inotify.makeRecord(inotify.name, logging.ERROR, __file__, 1,
                              "InotifyEmitter.queue_events() called when the thread is inactive", (), None)
    other = inotify.makeRecord(inotify.name, logging.ERROR, __file__, 1, "inotify watch limit reached", (), None)
    assert not inotify.filter(race) and inotify.filter(other)
