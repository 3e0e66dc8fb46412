"""Staging is all-or-nothing; teardown removes exactly what was staged."""

import json
import os
import time
from pathlib import Path

import pytest

from mokka_core.stage.staging import StagingError, stage_wave, staged_surfaces, teardown, teardown_all
from mokka_core.stage.store import NodeStore
from mokka_core.stage.surface import CharDevice, Dir, File, Symlink
from mokka_core.testing.tree import tree_snapshot as snapshot


def plan_a() -> list:
    return [
        Dir("proc/driver/nvidia/gpus"),
        File("proc/driver/nvidia/version", "NVRM version: 550\n"),
        Symlink("sys/bus/pci/devices/0000:1b:00.0", "../../../devices/pci0000:00/0000:1b:00.0"),
        File("etc/mokka.conf", "x=1\n", mode=0o600),
        CharDevice("dev/nvidia0", 195, 0),
    ]


def test_stage_and_teardown_leave_the_root_as_it_was(root: Path) -> None:
    before = snapshot(root)
    stage_wave({"a": plan_a(), "b": [File("sys/bus/pci/drivers/nvidia/bind", "")]}, root)
    assert (root / "proc/driver/nvidia/version").read_text() == "NVRM version: 550\n"
    assert os.readlink(root / "sys/bus/pci/devices/0000:1b:00.0").startswith("../../../devices")
    assert (root / "etc/mokka.conf").stat().st_mode & 0o777 == 0o600
    assert (root / "dev/nvidia0").exists()
    assert staged_surfaces(root) == ["a", "b"]
    assert teardown(root, "a") and teardown(root, "b")
    assert snapshot(root) == before


def test_teardown_in_either_order_removes_shared_directories(root: Path) -> None:
    before = snapshot(root)
    stage_wave({"a": [File("sys/x/a", "1")], "b": [File("sys/x/b", "2")]}, root)
    teardown(root, "b")
    teardown(root, "a")
    assert snapshot(root) == before


def test_teardown_all_removes_every_surface_and_their_shared_directories(root: Path) -> None:
    before = snapshot(root)
    stage_wave({"a": plan_a(), "b": [File("sys/bus/pci/drivers/nvidia/bind", "")], "c": [File("sys/x/c", "3")]}, root)
    assert sorted(teardown_all(root)) == ["a", "b", "c"]
    assert snapshot(root) == before


def test_teardown_all_removes_what_it_can_and_names_an_unreadable_manifest(root: Path) -> None:
    stage_wave({"a": [File("sys/x/a", "1")], "b": [File("sys/x/b", "2")]}, root)
    NodeStore(root).manifest("b").write_text("{not json")
    with pytest.raises(StagingError, match="b"):
        teardown_all(root)
    assert not (root / "sys/x/a").exists() and (root / "sys/x/b").exists()


def test_conflict_with_foreign_file_publishes_nothing(root: Path) -> None:
    before = snapshot(root)
    with pytest.raises(StagingError, match="etc/hostname already exists and is not Mokka's"):
        stage_wave({"a": plan_a(), "b": [File("etc/hostname", "evil\n")]}, root)
    assert snapshot(root) == before


def test_unbuildable_entry_publishes_nothing(root: Path, tmp_path: Path) -> None:
    from mokka_core.stage.surface import Copy

    before = snapshot(root)
    with pytest.raises(StagingError, match="surface b: cannot build /usr/lib/x"):
        stage_wave({"a": plan_a(), "b": [Copy("usr/lib/x", tmp_path / "missing.so")]}, root)
    assert snapshot(root) == before


def test_two_surfaces_cannot_claim_one_path(root: Path) -> None:
    with pytest.raises(StagingError, match="also staged by surface a"):
        stage_wave({"a": [File("x", "1")], "b": [File("x", "2")]}, root)


@pytest.mark.parametrize("bad", ["/etc/passwd", "../outside", "a/../../b", "a//b"])
def test_paths_must_stay_inside_the_root(root: Path, bad: str) -> None:
    with pytest.raises(StagingError, match="must be relative"):
        stage_wave({"a": [File(bad, "x")]}, root)


def test_restage_replaces_and_drops(root: Path) -> None:
    before = snapshot(root)
    stage_wave({"a": [File("sys/one", "1"), File("sys/two", "2")]}, root)
    stage_wave({"a": [File("sys/one", "ONE")]}, root)
    assert (root / "sys/one").read_text() == "ONE"
    assert not (root / "sys/two").exists()
    teardown(root, "a")
    assert snapshot(root) == before


def test_restage_removes_the_directories_its_plan_dropped(root: Path) -> None:
    """A destroyed GPU instance takes its ``gi<G>/`` and ``ci<C>/`` directories with it."""
    caps = "proc/driver/nvidia/capabilities"
    unpartitioned = [File(f"{caps}/mig/config", "1"), Dir("dev/nvidia-caps", 0o755)]
    stage_wave({"a": unpartitioned}, root)
    before = snapshot(root)
    stage_wave({"a": [*unpartitioned, File(f"{caps}/gpu0/mig/gi1/access", "12"), Dir(f"{caps}/gpu0/mig/gi2/ci0"),
                      File(f"{caps}/gpu0/mig/gi1/ci0/access", "13")]}, root)
    stage_wave({"a": unpartitioned}, root)
    assert snapshot(root) == before
    assert teardown(root, "a")
    assert sorted(p.name for p in root.iterdir()) == ["etc"]


def test_restage_removes_a_dropped_directory_another_surface_also_emptied(root: Path) -> None:
    """A node with fewer GPUs: the gpu surface's device directory held the pci surface's files too."""
    stage_wave({"a": [File("sys/devices/pci0/gpu1/a", "1")], "b": [File("sys/devices/pci0/gpu1/b", "2")]}, root)
    stage_wave({"a": [File("sys/devices/pci0/gpu0/a", "1")], "b": [File("sys/devices/pci0/gpu0/b", "2")]}, root)
    assert sorted(os.listdir(root / "sys/devices/pci0")) == ["gpu0"]
    assert teardown_all(root) == ["a", "b"]
    assert sorted(p.name for p in root.iterdir()) == ["etc"]


def test_restage_keeps_dropped_directories_that_are_not_only_its_own(root: Path) -> None:
    (root / "sys/host").mkdir(parents=True)  # there before staging: never the surface's
    stage_wave({"a": [File("sys/host/x/a", "1"), File("sys/mine/a", "1"), File("sys/shared/a", "1")],
                "b": [File("sys/shared/b", "2")]}, root)
    (root / "sys/mine/someone-elses").write_text("")
    stage_wave({"a": [File("sys/other", "1")]}, root)
    assert (root / "sys/host").is_dir() and not (root / "sys/host/x").exists()
    assert (root / "sys/mine/someone-elses").exists()  # in use: stays, still a's to remove once empty
    assert (root / "sys/shared/b").exists()
    (root / "sys/mine/someone-elses").unlink()
    assert teardown(root, "a") and teardown(root, "b")
    assert sorted(p.name for p in (root / "sys").iterdir()) == ["host"]


def test_a_restage_makes_again_a_directory_removed_behind_its_back(root: Path) -> None:
    plan = [Dir("sys/module/nvidia/holders"), File("sys/module/nvidia/refcnt", "2\n")]
    stage_wave({"a": plan}, root)
    (root / "sys/module/nvidia/holders").rmdir()
    stage_wave({"a": plan}, root)
    assert (root / "sys/module/nvidia/holders").is_dir()
    assert teardown(root, "a")
    assert not (root / "sys").exists()


def test_a_restage_puts_back_what_was_removed_from_a_directory_left_alone(root: Path) -> None:
    """A directory untouched for a while is known by its ctime, which its next change moves."""
    plan = [File("sys/module/nvidia/refcnt", "2\n"), File("sys/module/nvidia/initstate", "live\n"),
            File("usr/lib/state", "1")]
    stage_wave({"a": plan}, root)
    time.sleep(0.1)
    stage_wave({"a": [*plan[:2], File("usr/lib/state", "2")]}, root)  # sys/module/nvidia listed, left alone
    (root / "sys/module/nvidia/refcnt").unlink()
    stage_wave({"a": [*plan[:2], File("usr/lib/state", "3")]}, root)
    assert (root / "sys/module/nvidia/refcnt").read_text() == "2\n"
    assert teardown(root, "a")


def test_a_restage_reads_the_manifest_another_writer_left(root: Path) -> None:
    """This process remembers the manifests it wrote, never one that another process replaced since."""
    stage_wave({"a": [File("sys/one", "1")]}, root)
    path = NodeStore(root).manifest("a")
    record = json.loads(path.read_text())
    (root / "sys/two").write_text("2")  # another writer's wave: a's plan had sys/two too
    record["entries"].append("sys/two")
    path.write_text(json.dumps(record))
    stage_wave({"a": [File("sys/one", "1")]}, root)
    assert not (root / "sys/two").exists()  # dropped from the plan: removed, as that manifest says it is a's
    assert teardown(root, "a")


def test_teardown_of_unstaged_surface_is_a_no_op(root: Path) -> None:
    assert teardown(root, "nothing") is False


def test_a_lone_replacement_needs_no_journal_and_a_kill_before_its_rename_leaves_what_recover_removes(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One owned file replaced, nothing else: its rename is atomic by itself, so no journal, no backup and
    no scratch directory; a kill just before the rename leaves the built file, named as scratch is."""
    from mokka_core.stage import staging

    plan = [File("usr/lib/state", "1"), File("proc/driver/nvidia/version", "550\n")]
    stage_wave({"a": plan}, root)
    before = snapshot(root)

    def no_journal(*_args: object) -> set[str]:
        raise AssertionError("a lone replacement wrote a journal")

    monkeypatch.setattr(staging, "_write_journal", no_journal)
    monkeypatch.setattr(staging, "scratch_dir", no_journal)
    pid = os.fork()
    if pid == 0:  # the wave, killed where its rename would be
        monkeypatch.setattr(staging, "_move_into_place", lambda *_args: os._exit(9))
        stage_wave({"a": [File("usr/lib/state", "2"), plan[1]]}, root)
        os._exit(0)
    assert os.waitpid(pid, 0)[1] >> 8 == 9
    assert (root / "usr/lib/state").read_text() == "1"
    assert [p.name for p in root.glob(".mokka-stage-*")] != []  # what the kill left
    assert staging.recover(root) == []
    assert snapshot(root) == before
    stage_wave({"a": [File("usr/lib/state", "2"), plan[1]]}, root)
    assert (root / "usr/lib/state").read_text() == "2"
    assert snapshot(root).keys() == before.keys()  # no backup, no scratch left
    assert teardown(root, "a")


def test_a_wave_that_replaces_two_files_keeps_its_journal(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mokka_core.stage import staging

    stage_wave({"a": [File("usr/lib/one", "1"), File("usr/lib/two", "1")]}, root)
    journals = []
    real = staging._write_journal
    monkeypatch.setattr(staging, "_write_journal", lambda *args: journals.append(1) or real(*args))
    stage_wave({"a": [File("usr/lib/one", "2"), File("usr/lib/two", "2")]}, root)
    assert journals == [1]
    assert teardown(root, "a")


def test_trusted_entries_are_not_looked_for_and_the_rest_are(root: Path) -> None:
    """``trusted``: entries this process's last wave published as they are (render's reused plan parts)."""
    plan = [File("sys/module/nvidia/refcnt", "2\n"), File("sys/module/nvidia/initstate", "live\n"),
            File("usr/lib/state", "1")]
    stage_wave({"a": plan}, root)
    (root / "sys/module/nvidia/refcnt").unlink()
    (root / "sys/module/nvidia/initstate").unlink()
    stage_wave({"a": [*plan[:2], File("usr/lib/state", "2")]}, root, trusted={"a": {0}})
    assert not (root / "sys/module/nvidia/refcnt").exists()  # vouched for: back at the next full render
    assert (root / "sys/module/nvidia/initstate").read_text() == "live\n"
    stage_wave({"a": [*plan[:2], File("usr/lib/state", "3")]}, root)
    assert (root / "sys/module/nvidia/refcnt").read_text() == "2\n"
    assert teardown(root, "a")
