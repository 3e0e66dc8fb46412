"""A node root no other user controls, and staging and teardown that never go through a link under it."""

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from mokka_core.stage import beneath
from mokka_core.stage.beneath import UnsafePath, check_root, make_root
from mokka_core.stage.staging import StagingError, stage_wave, teardown, teardown_all
from mokka_core.stage.store import NodeStore
from mokka_core.stage.surface import Dir, File, Symlink
from mokka_core.testing.tree import tree_snapshot as snapshot

NOBODY = 65534


def needs_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root, to give a directory to another user")


@pytest.fixture(params=["openat2", "O_NOFOLLOW"])
def walk_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways of walking beneath a handle: the kernel's openat2, and one component at a time."""
    if request.param == "O_NOFOLLOW":
        monkeypatch.setattr(beneath, "_openat2_works", False)
    return str(request.param)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory outside the node root, with a file in it: what nothing may write to or delete."""
    directory = tmp_path / "outside"
    (directory / "lib" / "x").mkdir(parents=True)
    (directory / "lib" / "x" / "f").write_text("victim\n")
    (directory / "victim").write_text("victim\n")
    return directory


def test_root_writable_by_others_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "node"
    root.mkdir()
    (root / "usr").symlink_to("/etc")  # what another user could have put there
    os.chmod(root, 0o777)
    done = subprocess.run([sys.executable, "-m", "mokka_core", "node", "up", "--root", str(root), "--profile", "t4"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"{root} is writable by group or others" in done.stderr and "0777" in done.stderr, done.stderr
    assert "chmod go-w" in done.stderr
    assert [p.name for p in root.iterdir()] == ["usr"]  # refused before anything was written there
    assert stat.S_IMODE(root.stat().st_mode) == 0o777


def test_an_empty_root_of_ones_own_that_others_may_write_is_closed_to_them_first(tmp_path: Path) -> None:
    """A container's emptyDir volume (0777, the single-surface images' /node): empty once nobody else can add to
    it, so it is made writable by its owner only and used."""
    root = tmp_path / "node"
    root.mkdir()
    os.chmod(root, 0o777)
    make_root(root)
    assert stat.S_IMODE(root.stat().st_mode) == 0o755


def test_root_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    needs_root()
    root = tmp_path / "node"
    root.mkdir(mode=0o755)
    os.chown(root, NOBODY, NOBODY)
    with pytest.raises(UnsafePath, match=f"{root} is owned by another user \\(owner uid {NOBODY}"):
        make_root(root)


def test_ancestor_writable_by_others_is_refused_and_a_root_owned_sticky_one_is_not(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.raises(UnsafePath, match=f"{shared} is writable by group or others"):
        make_root(shared / "node")
    assert not (shared / "node").exists()
    if os.geteuid() == 0:
        os.chmod(shared, 0o1777)  # as /tmp
        make_root(shared / "node")
        assert (shared / "node").stat().st_mode & 0o777 == 0o755


def test_a_link_on_the_way_to_the_root_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    needs_root()
    (tmp_path / "real").mkdir()
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "real")
    check_root(link / "node")  # its owner's link: followed, and what it leads to checked
    os.lchown(link, NOBODY, NOBODY)
    with pytest.raises(UnsafePath, match="symbolic link owned by another user"):
        check_root(link / "node")


def test_a_link_planted_under_the_root_makes_staging_refuse(root: Path, outside: Path, walk_kind: str) -> None:
    (root / "usr").symlink_to(outside)
    before, there = snapshot(root), snapshot(outside)
    with pytest.raises(UnsafePath, match=f"{root}/usr is a symbolic link"):
        stage_wave({"gpu": [Dir("usr/lib/y"), File("usr/lib/y/libnvidia-ml.so", "elf"), File("etc/z", "1")]}, root)
    assert snapshot(outside) == there  # nothing written through the link
    assert snapshot(root) == before  # and nothing left under the root (the wave rolled back)


def test_a_link_repointed_before_teardown_deletes_nothing_outside_the_root(root: Path, outside: Path,
                                                                            walk_kind: str) -> None:
    stage_wave({"gpu": [File("usr/lib/x/f", "staged"), File("usr/lib/x/g", "staged")]}, root)
    for name in ("f", "g"):
        (root / "usr/lib/x" / name).unlink()
    (root / "usr/lib/x").rmdir()
    (root / "usr/lib/x").symlink_to(outside / "lib" / "x")
    there = snapshot(outside)
    with pytest.raises(StagingError, match="usr/lib/x is a symbolic link"):
        teardown_all(root)
    assert snapshot(outside) == there
    assert NodeStore(root).manifest("gpu").exists()  # kept: once the link is gone, teardown finds the rest
    (root / "usr/lib/x").unlink()
    assert teardown(root, "gpu") and not (root / "usr").exists()


def test_links_staging_makes_are_made_and_removed_as_links(root: Path, outside: Path) -> None:
    """A link as the last component is an entry like any other (the driver's .so chain): only following
    one on the way is refused."""
    before = snapshot(root)
    stage_wave({"gpu": [File("usr/lib/libnvidia-ml.so.550", "elf"),
                        Symlink("usr/lib/libnvidia-ml.so.1", "libnvidia-ml.so.550"),
                        Symlink("usr/lib/outside", str(outside))]}, root)
    assert os.readlink(root / "usr/lib/libnvidia-ml.so.1") == "libnvidia-ml.so.550"
    stage_wave({"gpu": [File("usr/lib/libnvidia-ml.so.550", "elf2"),
                        Symlink("usr/lib/libnvidia-ml.so.1", "libnvidia-ml.so.550")]}, root)
    assert (outside / "victim").exists() and not (root / "usr/lib/outside").exists()
    assert teardown(root, "gpu")
    assert snapshot(root) == before and (outside / "victim").exists()


@pytest.mark.parametrize("bad", ["../victim", "/etc/victim", "usr/../../victim", "usr/a\0b", "", 7])
def test_manifest_entries_that_are_not_plain_relative_paths_are_refused(root: Path, outside: Path,
                                                                          bad: object) -> None:
    stage_wave({"gpu": [File("usr/lib/f", "1")]}, root)
    manifest = NodeStore(root).manifest("gpu")
    data = json.loads(manifest.read_text())
    data["entries"].append(str(outside / "victim") if bad == "/etc/victim" else bad)
    if bad == "../victim":
        (root.parent / "victim").write_text("victim\n")
    manifest.write_text(json.dumps(data))
    with pytest.raises(StagingError, match="not a plain relative path under the root"):
        teardown(root, "gpu")
    assert (outside / "victim").exists() and (root / "usr/lib/f").exists()
    if bad == "../victim":
        assert (root.parent / "victim").exists()


def test_directories_staging_makes_are_not_writable_by_others_whatever_the_umask(root: Path) -> None:
    old = os.umask(0)
    try:
        stage_wave({"gpu": [File("usr/lib/x/f", "1")]}, root)
    finally:
        os.umask(old)
    for rel in ("usr", "usr/lib", "usr/lib/x", "var/lib/mokka/manifests"):
        assert (root / rel).stat().st_mode & 0o022 == 0, rel


def test_a_directory_others_may_write_under_the_root_makes_staging_refuse(root: Path) -> None:
    (root / "usr").mkdir()
    os.chmod(root / "usr", 0o777)
    with pytest.raises(UnsafePath, match=f"{root}/usr is writable by group or others"):
        stage_wave({"gpu": [File("usr/lib/f", "1")]}, root)
    assert list((root / "usr").iterdir()) == []


def test_node_in_a_temporary_directory_others_may_write_is_refused(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from mokka_core.testing import node_api

    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    monkeypatch.setattr(node_api, "FAST_TMP", shared)
    with pytest.raises(UnsafePath, match=f"{shared} is writable by group or others"), node_api.Node("t4"):
        pass
    assert list(shared.iterdir()) == []  # its temporary directory removed


def test_run_state_paths_that_leave_the_root_are_refused_by_teardown(root: Path, outside: Path) -> None:
    import time

    from mokka_core.node.runstate import RunState
    from mokka_core.node.teardown import teardown_node

    (outside / "empty").mkdir()
    RunState(pid=2**22 + 1, start_ticks=None, service_files=["../outside/victim", str(outside / "victim")]).save(root)
    done = teardown_node(root, time.monotonic() + 10)
    assert (outside / "victim").exists()
    assert sum("not a plain relative path, refused" in left for left in done.left) == 2, done.left
    RunState(pid=2**22 + 1, start_ticks=None, created_dirs=["var", "../outside/empty"]).save(root)
    done = teardown_node(root, time.monotonic() + 10)
    assert (outside / "empty").is_dir()
    assert ["not a plain relative path, refused" in left for left in done.left] == [True], done.left


def test_nothing_the_daemon_makes_under_the_root_is_writable_by_others_whatever_the_umask(tmp_path: Path) -> None:
    import stat

    from mokka_core.model.spec import NodeSpec
    from mokka_core.node.settings import NodeSettings
    from mokka_core.testing.runner import DaemonRunner, ProbeSurface, StaticSurface

    root = tmp_path / "node"
    old = os.umask(0)
    try:
        settings = NodeSettings(root=root, spec=NodeSpec(profile="h100", gpus=2), supervise=False)
        with DaemonRunner(settings, {"probe": ProbeSurface(), "static": StaticSurface()}):
            writable = [str(path.relative_to(root)) for path in [root, *root.rglob("*")]
                        if not path.is_symlink() and not stat.S_ISCHR(path.lstat().st_mode)
                        and path.lstat().st_mode & 0o022]
    finally:
        os.umask(old)
    assert writable == []


def test_teardown_of_a_root_that_is_gone_removes_nothing_and_says_so(tmp_path: Path) -> None:
    from mokka_core.stage.staging import recover

    gone = tmp_path / "gone"
    assert teardown_all(gone) == [] and recover(gone) == [] and not teardown(gone, "gpu")


def test_a_surface_staged_alone_refuses_a_root_writable_by_others(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from mokka_core.cli.sim import make_app
    from mokka_core.testing.runner import ProbeSurface

    app = make_app(ProbeSurface, "probe")
    root = tmp_path / "node"
    root.mkdir()
    (root / "planted").mkdir()
    os.chmod(root, 0o777)
    done = CliRunner().invoke(app, ["stage", "--root", str(root), "-p", "t4"])
    assert isinstance(done.exception, UnsafePath) and "writable by group or others" in str(done.exception)
    assert [p.name for p in root.iterdir()] == ["planted"]
    os.chmod(root, 0o755)
    assert CliRunner().invoke(app, ["stage", "--root", str(root), "-p", "t4"]).exit_code == 0
    assert CliRunner().invoke(app, ["teardown", "--root", str(root)]).exit_code == 0


def test_node_teardown_never_removes_its_bookkeeping_through_a_link(root: Path, tmp_path: Path) -> None:
    import time

    from mokka_core.node.runstate import RunState
    from mokka_core.node.teardown import teardown_node
    from mokka_core.stage.store import STATE_DIR

    RunState(pid=2**22 + 1, start_ticks=None).save(root)
    store = NodeStore(root)
    for path in (store.node_file, store.snapshot, store.lock_file, store.log_dir / "node.log"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("victim\n")
    elsewhere = tmp_path / "elsewhere"
    (root / STATE_DIR).rename(elsewhere)  # the state directory moved out, a link left in its place
    (root / STATE_DIR).symlink_to(elsewhere)
    there = snapshot(elsewhere)
    done = teardown_node(root, time.monotonic() + 10)
    assert snapshot(elsewhere) == there
    assert any("is a symbolic link" in left for left in done.left), done.left


def test_node_teardown_removes_the_supervisor_socket_kept_outside_a_long_root(tmp_path: Path) -> None:
    import time

    from mokka_core.node.runstate import RunState
    from mokka_core.node.supervise import socket_path
    from mokka_core.node.teardown import teardown_node

    root = tmp_path / ("r" * 100)  # too long a path for a unix socket in its state directory
    RunState(pid=2**22 + 1, start_ticks=None).save(root)
    sock = socket_path(root)
    assert not sock.is_relative_to(root)
    sock.write_text("")
    try:
        done = teardown_node(root, time.monotonic() + 10)
        assert not sock.exists() and done.left == []
    finally:
        sock.unlink(missing_ok=True)
