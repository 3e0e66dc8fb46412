"""Staging as the node daemon relies on it: path checks, atomic replacement, untouched unchanged files."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from mokka_core.stage.staging import StagingError, stage_wave, teardown
from mokka_core.stage.surface import File, Symlink


@pytest.mark.parametrize("bad", ["/etc/x", "..", "../x", "a/../b", "./a", "a//b", "a/", "a/."])
def test_plan_paths_must_be_relative_and_normalised(tmp_path: Path, bad: str) -> None:
    with pytest.raises(StagingError, match="must be relative, normalised"):
        stage_wave({"a": [File(bad, "x")]}, tmp_path)


def test_restaging_never_leaves_a_file_missing(tmp_path: Path) -> None:
    stop = threading.Event()
    misses: list[str] = []

    def reader() -> None:
        while not stop.is_set():
            try:
                (tmp_path / "lib/state").read_bytes()
                (tmp_path / "lib/link").readlink()
            except OSError as exc:
                misses.append(repr(exc))

    stage_wave({"gpu": [File("lib/state", "0"), Symlink("lib/link", "state")]}, tmp_path)
    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for n in range(1, 200):
            stage_wave({"gpu": [File("lib/state", str(n)), Symlink("lib/link", "state" if n % 2 else "./state")]},
                       tmp_path)
    finally:
        stop.set()
        thread.join()
    assert not misses, misses[:3]
    assert (tmp_path / "lib/state").read_text() == "199"
    assert teardown(tmp_path, "gpu")
    assert not (tmp_path / "lib").exists()


def test_unchanged_entries_keep_their_inode_and_changed_ones_are_replaced(tmp_path: Path) -> None:
    stage_wave({"a": [File("x/same", "1"), File("x/changes", "1")]}, tmp_path)
    same, changes = (tmp_path / "x/same").stat().st_ino, (tmp_path / "x/changes").stat().st_ino
    stage_wave({"a": [File("x/same", "1"), File("x/changes", "2")]}, tmp_path)
    assert (tmp_path / "x/same").stat().st_ino == same
    assert (tmp_path / "x/changes").stat().st_ino != changes and (tmp_path / "x/changes").read_text() == "2"
    (tmp_path / "x/same").unlink()  # removed behind our back: the next restage puts it back
    stage_wave({"a": [File("x/same", "1"), File("x/changes", "2")]}, tmp_path)
    assert (tmp_path / "x/same").read_text() == "1"


def test_entry_digests_follow_what_each_entry_publishes(tmp_path: Path) -> None:
    from mokka_core.stage.staging import entry_digest
    from mokka_core.stage.surface import CharDevice, Copy, Symlink

    assert entry_digest(File("a", "x")) == entry_digest(File("b", "x"))  # the path is the manifest's key, not content
    assert entry_digest(File("a", "x")) != entry_digest(File("a", "x", 0o600))
    assert entry_digest(Symlink("a", "x")) != entry_digest(File("a", "x"))  # equal tuples, different entries
    assert entry_digest(CharDevice("a", 195, 0)) != entry_digest(CharDevice("a", 195, 1))
    big = "y" * 100_000
    assert entry_digest(File("a", big)) == entry_digest(File("a", big)) != entry_digest(File("a", big + "z"))
    source = tmp_path / "source"
    source.write_text("1")
    first = entry_digest(Copy("a", source))
    source.write_text("22")  # the same entry, a changed source: a new digest
    assert entry_digest(Copy("a", source)) != first
    source.unlink()
    assert entry_digest(Copy("a", source)) == ""
