"""The node's state directory: its layout, the node lock, the one atomic write, and who may rename files."""

from __future__ import annotations

import ast
import functools
import os
import posixpath
import select
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from mokka_core.model.inputs import fingerprint
from mokka_core.stage import store
from mokka_core.stage.store import STATE_DIR, NodeStore, atomic_write, write_temps

PACKAGES = Path(__file__).resolve().parents[2]
#: The only modules of product code that may rename files, and why.
RENAMERS = {
    "mokka-core/src/mokka_core/stage/store.py": "atomic_write, the one atomic write of a file",
    "mokka-core/src/mokka_core/stage/staging.py": "publishing a wave of plans, and rolling it back",
    "mokka-core/src/mokka_core/stage/beneath.py": "staging's rollback, relative to a directory handle",
    "mokka-core/src/mokka_core/stage/nvidia_smi.py": "publishing an unpacked Debian package directory in the cache",
    "mokka-core/src/mokka_core/run/stage_cache.py": "publishing a staged tree in the cache, and taking one's name away",
    "mokka-core/src/mokka_core/testing/configmap.py": "a ConfigMap volume of tests, swapped as the kubelet does",
    "mokka-core/src/mokka_core/node/cdi_link.py": "the CDI spec link put in place over a stale one (a symlink)",
}


def layout_constants() -> dict[str, str]:
    return {name: value for name, value in vars(store).items() if name.isupper() and isinstance(value, str)}


def layout_properties(node: NodeStore) -> dict[str, Path]:
    return {name: getattr(node, name) for name, value in vars(NodeStore).items()
            if isinstance(value, (property, functools.cached_property)) and isinstance(getattr(node, name), Path)}


def test_every_name_is_unique_and_under_the_state_dir(tmp_path: Path) -> None:
    constants = layout_constants()
    assert len(set(constants.values())) == len(constants), constants
    for name, rel in constants.items():
        assert rel == STATE_DIR or rel.startswith(f"{STATE_DIR}/"), name
        assert posixpath.normpath(rel) == rel, name

    node = NodeStore(tmp_path)
    paths = layout_properties(node)
    named = {name: path for name, path in paths.items() if path != node.dir}
    assert set(paths) - set(named) == {"dir"}  # the directory itself
    assert len(set(named.values())) == len(named), named
    for name, path in paths.items():  # each property is one of the spelled names, under this root
        assert path.relative_to(tmp_path).as_posix() in constants.values(), name
    assert node.manifest("gpu").parent == node.manifests_dir
    assert set(node.bookkeeping) <= set(named.values())


def test_the_lock_excludes_a_second_holder_in_another_thread(tmp_path: Path) -> None:
    node = NodeStore(tmp_path / "root")
    acquired = threading.Event()

    def second() -> None:
        with node.lock():
            acquired.set()

    with node.lock():
        thread = threading.Thread(target=second)
        thread.start()
        assert not acquired.wait(0.3), "a second thread got the lock while it was held"
    assert acquired.wait(5)
    thread.join()


def test_the_lock_excludes_a_second_holder_in_another_process(tmp_path: Path) -> None:
    root = tmp_path / "root"
    code = ("import sys; from pathlib import Path; from mokka_core.stage.store import NodeStore\n"
            "with NodeStore(Path(sys.argv[1])).lock(): print('locked', flush=True)\n")
    with NodeStore(root).lock():
        child = subprocess.Popen([sys.executable, "-c", code, str(root)], stdout=subprocess.PIPE, text=True)
        try:
            ready, _, _ = select.select([child.stdout], [], [], 1.0)
            assert not ready, "another process got the lock while it was held"
        except BaseException:
            child.kill()
            raise
    assert child.communicate(timeout=10)[0] == "locked\n"
    assert child.returncode == 0


def test_atomic_write_gives_content_mode_and_the_fingerprint_of_the_new_file(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    old = os.umask(0o077)
    try:
        written = atomic_write(path, "grüße\n")
        assert path.read_bytes() == "grüße\n".encode()
        assert path.stat().st_mode & 0o777 == 0o644  # exactly the mode, whatever the umask
        assert written == fingerprint(path)
        again = atomic_write(path, b"\x00\x01", mode=0o600)
    finally:
        os.umask(old)
    assert path.read_bytes() == b"\x00\x01"
    assert path.stat().st_mode & 0o777 == 0o600
    assert again == fingerprint(path) != written
    assert os.listdir(tmp_path) == ["state.json"]


def test_atomic_write_fsyncs_file_and_directory_only_when_durable(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    atomic_write(tmp_path / "a", "x")
    assert synced == []
    atomic_write(tmp_path / "b", "x", durable=True)
    assert len(synced) == 2  # the file before the rename, its directory after


@pytest.mark.parametrize("failure", [KeyboardInterrupt, OSError])
def test_a_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             failure: type[BaseException]) -> None:
    path = tmp_path / "state.json"
    path.write_text("old")

    def fail(_: object) -> None:  # after the data is written, before the rename
        raise failure("in the middle")

    monkeypatch.setattr(store, "fingerprint", fail)
    with pytest.raises(failure):
        atomic_write(path, "new" * 100_000)
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["state.json"]


def test_write_temps_finds_what_a_killed_write_left_and_nothing_else(tmp_path: Path) -> None:
    killed = subprocess.run([sys.executable, "-c", (
        "import os, sys; from pathlib import Path; from mokka_core.stage import store\n"
        "store.os.replace = lambda *a: os.kill(os.getpid(), 9)\n"
        "store.atomic_write(Path(sys.argv[1]) / 'node.json', '{}')"), str(tmp_path)])
    assert killed.returncode == -9
    for name in (".notes.tmp", ".x.0123456789ab.tmp.bak", "node.json.0123456789ab.tmp", ".x.0123456789AB.tmp"):
        (tmp_path / name).write_text("")
    atomic_write(tmp_path / "daemon.json", "{}")
    left = write_temps(tmp_path)
    assert len(left) == 1 and left[0].name.startswith(".node.json.") and left[0].name.endswith(".tmp")
    assert write_temps(tmp_path / "missing") == []


def test_a_write_over_a_directory_fails_and_leaves_nothing(tmp_path: Path) -> None:
    (tmp_path / "taken" / "inside").mkdir(parents=True)
    with pytest.raises(OSError):
        atomic_write(tmp_path / "taken", "x")
    assert os.listdir(tmp_path) == ["taken"]


def test_a_reader_never_sees_a_partial_file(tmp_path: Path) -> None:
    path = tmp_path / "big"
    versions = [bytes([ord("a") + n]) * (1 << 20) for n in range(3)]
    atomic_write(path, versions[0])
    done = threading.Event()

    def writer() -> None:
        try:
            for n in range(150):
                atomic_write(path, versions[n % len(versions)])
        finally:
            done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    reads = 0
    while not done.is_set() or reads == 0:
        assert path.read_bytes() in versions
        reads += 1
    thread.join()
    assert reads > 0


MOVES = {("os", "replace"), ("os", "rename"), ("os", "renames"), ("shutil", "move")}


def renames(source: str) -> list[int]:
    """Lines calling os.replace/os.rename/os.renames/shutil.move, or a rename/replace method of a path."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        name, owner = node.func.attr, node.func.value
        module = owner.id if isinstance(owner, ast.Name) else None
        by_module = (module, name) in MOVES
        path_method = module not in ("os", "shutil") and (  # Path.replace takes one argument, str.replace two
            name == "rename" or (name == "replace" and len(node.args) == 1 and not node.keywords))
        if by_module or path_method:
            found.append(node.lineno)
    return sorted(found)


def test_only_the_listed_modules_of_product_code_rename_files() -> None:
    places = {}
    for path in sorted(PACKAGES.glob("*/src/**/*.py")):
        lines = renames(path.read_text())
        if lines:
            places[path.relative_to(PACKAGES).as_posix()] = lines
    listing = "\n".join(f"  {module}: lines {', '.join(map(str, lines))}" for module, lines in places.items())
    assert set(places) <= set(RENAMERS), (
        f"only {', '.join(RENAMERS)} may rename files (write one through stage.store.atomic_write);"
        f" found:\n{listing}")
    assert len(places["mokka-core/src/mokka_core/stage/store.py"]) == 1, listing


def test_the_rename_scan_sees_every_spelling() -> None:
    source = ("import os, shutil\nos.replace(a, b)\nos.rename(a, b)\nshutil.move(a, b)\npath.rename(b)\n"
              "path.replace(b)\ntext.replace('a', 'b')\ndataclasses.replace(x, y=1)\n")
    assert renames(source) == [2, 3, 4, 5, 6]


def test_a_live_holder_makes_a_waiter_give_up_naming_it(tmp_path: Path) -> None:
    """A stuck lock holder blocked every ctl forever, silently: now a bounded wait, then its pid and what to do."""
    node = NodeStore(tmp_path)
    node.lock_file.parent.mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
        "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)"), str(node.lock_file)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        t0 = time.monotonic()
        with pytest.raises(store.NodeLocked) as caught, node.lock(timeout_s=0.3):
            pass
        assert 0.3 <= time.monotonic() - t0 < 3
        message = str(caught.value)
        assert f"pid {holder.pid}" in message and "MOKKA_LOCK_TIMEOUT_S" in message and f"kill {holder.pid}" in message
    finally:
        holder.kill()
        holder.communicate()
    with node.lock(timeout_s=0.3):  # the holder gone, the lock is free again
        pass


def test_lock_files_open_to_their_owner_only(tmp_path: Path) -> None:
    """A 0644 lock file let any user take a shared flock on it, and every ctl waited on that user."""
    node = NodeStore(tmp_path)
    with node.lock():
        assert node.lock_file.stat().st_mode & 0o777 == 0o600
    node.lock_file.chmod(0o644)  # as an older Mokka left it
    with node.lock():
        assert node.lock_file.stat().st_mode & 0o777 == 0o600


def test_a_lock_that_is_not_a_file_is_refused_naming_it(tmp_path: Path) -> None:
    node = NodeStore(tmp_path)
    node.lock_file.parent.mkdir(parents=True)
    os.mkfifo(node.lock_file)
    with pytest.raises(store.NodeLocked, match=f"{node.lock_file}.* not a regular file"), node.lock(timeout_s=0.3):
        pass


def test_the_lock_timeout_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert store.lock_timeout_s() == store.LOCK_TIMEOUT_S == 10
    monkeypatch.setenv("MOKKA_LOCK_TIMEOUT_S", "2.5")
    assert store.lock_timeout_s() == 2.5
    monkeypatch.setenv("MOKKA_LOCK_TIMEOUT_S", "soon")
    with pytest.raises(store.NodeLocked, match="MOKKA_LOCK_TIMEOUT_S"):
        store.lock_timeout_s()
