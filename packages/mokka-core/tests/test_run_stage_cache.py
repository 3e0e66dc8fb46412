"""mokka run's staged tree in Mokka's cache: what a run shows from it is what staging in full makes.

The namespace tests stage a node as ``mokka run``'s child does (a private mount namespace, a
tmpfs over the work directory) and compare every entry under the root: type, mode, content,
link target, device numbers.  They need root, as every mount namespace test does.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import stat
import time
from pathlib import Path

import pytest

from mokka_core.model.spec import NodeSpec
from mokka_core.run import namespace, resolved, stage_cache
from mokka_core.run.command import NodePlan, plan_node, stage_node
from mokka_core.stage.paths import NVML_STATE_FILE
from mokka_core.stage.render import plan_digest
from mokka_core.stage.store import KERNEL_LOG, NodeStore
from mokka_core.testing.consumers import required

needs_root = pytest.mark.skipif(os.geteuid() != 0 and not required(), reason="mount namespaces need root")


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MOKKA_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / stage_cache.CACHE_DIR


def listing(root: str) -> dict[str, list[object]]:
    """Every entry under ``root``: [type, mode, what it holds]."""
    found: dict[str, list[object]] = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(directory, name)
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode):
                with open(path, "rb") as f:
                    held: object = hashlib.sha256(f.read()).hexdigest()
                if path == str(NodeStore(Path(root)).snapshot):  # it records the node file's inode and mtime
                    data = json.loads(Path(path).read_text())
                    data["inputs"].pop(str(NodeStore(Path(root)).node_file))
                    held = data
                elif path.startswith(str(NodeStore(Path(root)).manifests_dir)):
                    held = json.loads(Path(path).read_text())
            elif stat.S_ISLNK(st.st_mode):
                held = os.readlink(path)
            elif stat.S_ISCHR(st.st_mode):
                held = [os.major(st.st_rdev), os.minor(st.st_rdev)]
            else:
                held = None
            found[os.path.relpath(path, root)] = [stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), held]
    return found


def staged_listing(node: NodePlan, workdir: Path,
                   cached: stage_cache.Claim | None) -> tuple[dict[str, list[object]], bool]:
    """Stage ``node`` as mokka run's child does, in a child of ours: the listing of its root, and whether the
    root is an overlay."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        code = 1
        try:
            namespace.unshare_mount_namespace(rootless=False)
            namespace.mount("mokka", str(workdir), "tmpfs", namespace.MS_NOSUID, "mode=755")
            staged = stage_node(node, workdir, cached)
            overlaid = any(line.split()[4] == str(staged.root) and " - overlay " in line
                           for line in Path("/proc/self/mountinfo").read_text().splitlines())
            with os.fdopen(write, "w") as out:
                json.dump({"overlaid": overlaid, "listing": listing(str(staged.root))}, out)
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        text = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    found = json.loads(text)
    return found["listing"], found["overlaid"]


class Runs:
    """Runs of nodes as ``mokka run`` stages them: each planned for a work directory of its own."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.count = 0
        self.overlaid = False  # whether the last run's root was an overlay of the cached tree

    def plan(self, spec: NodeSpec) -> tuple[NodePlan, Path]:
        self.count += 1
        workdir = self.tmp_path / f"run-{self.count}"
        workdir.mkdir()
        return plan_node(spec, workdir / "root"), workdir

    def cached(self, spec: NodeSpec, entry_key: str | None = None) -> tuple[dict[str, list[object]],
                                                                              dict[str, list[object]]]:
        """What a run shows from the cache (``entry_key``: default, the spec's own), and what staging the same
        plan in full makes."""
        node, workdir = self.plan(spec)
        claim = stage_cache.claim(entry_key or stage_cache.key(resolved.key(spec), node.plans))
        assert claim is not None
        try:
            shown, self.overlaid = staged_listing(node, workdir, claim)
        finally:
            claim.release()
        full, overlaid = staged_listing(node, workdir, None)
        assert not overlaid
        return shown, full


@needs_root
@pytest.mark.usefixtures("whole_node")
def test_a_run_shows_what_staging_in_full_makes(tmp_path: Path, cache: Path) -> None:
    runs, spec = Runs(tmp_path), NodeSpec(profile="h100", gpus=2)
    shown, full = runs.cached(spec)  # the entry built
    assert len(full) > 200 and shown == full
    (entry,) = cache.iterdir()
    assert (entry / stage_cache.TREE).is_dir()
    for _ in range(3):  # shown from it: what names the run's root or its boot time is written over it
        shown, full = runs.cached(spec)
        assert shown == full and runs.overlaid
    assert list(cache.iterdir()) == [entry]  # never judged stale, no build or trash left
    assert set(json.loads((entry / stage_cache.WRITTEN).read_text())) == {
        NVML_STATE_FILE, "var/run/cdi/nvidia.yaml", KERNEL_LOG}  # the log's loading lines are stamped at boot


@needs_root
@pytest.mark.usefixtures("whole_node")
def test_the_tree_of_another_node_costs_only_time_and_is_replaced(tmp_path: Path, cache: Path) -> None:
    """Whatever tree a run starts from, it shows its own node: the digests decide what is written.  A tree
    two runs wrote the same entries over is stale and built anew."""
    runs, other = Runs(tmp_path), NodeSpec(profile="a100", gpus=1)
    runs.cached(NodeSpec(profile="h100", gpus=4), "one-key")
    built = (cache / "one-key").stat().st_ino
    for _ in range(2):
        shown, full = runs.cached(other, "one-key")
        assert owned_dirs(shown) == owned_dirs(full)
        assert shown == full
    assert not (cache / "one-key").exists()  # the second run found the tree stale
    shown, full = runs.cached(other, "one-key")
    assert shown == full
    assert (cache / "one-key").stat().st_ino != built
    assert [entry.name for entry in cache.iterdir()] == ["one-key"]  # the stale one pruned


@needs_root
@pytest.mark.usefixtures("whole_node")
def test_a_run_leaves_alone_the_surfaces_the_sealed_tree_holds_as_planned(tmp_path: Path, cache: Path) -> None:
    runs, spec = Runs(tmp_path), NodeSpec(profile="h100", gpus=2)
    runs.cached(spec)
    (entry,) = cache.iterdir()
    node, _ = runs.plan(spec)
    digests = {name: plan_digest(plan) for name, plan in node.plans.items()}
    claim = stage_cache.claim(entry.name)
    assert claim is not None and claim.built
    try:
        # the state file and the CDI spec name the run's root: only their surfaces are staged again
        assert claim.held_as_planned(digests) == set(node.plans) - {"gpu", "cdi"}
        assert claim.held_as_planned({**digests, "pci": "another"}) == set(node.plans) - {"gpu", "cdi", "pci"}
    finally:
        claim.release()


@needs_root
@pytest.mark.usefixtures("whole_node")
@pytest.mark.parametrize("change", ["remove an entry", "add a name", "rewrite a manifest"])
def test_a_tree_changed_since_its_seal_is_compared_entry_by_entry(tmp_path: Path, cache: Path, change: str) -> None:
    runs, spec = Runs(tmp_path), NodeSpec(profile="h100", gpus=1)
    runs.cached(spec)
    (entry,) = cache.iterdir()
    tree = entry / stage_cache.TREE
    time.sleep(0.05)  # past the kernel's coarse clock tick: the change moves a ctime
    if change == "remove an entry":
        next((tree / "sys/devices").rglob("vendor")).unlink()  # the pci surface's, held as planned otherwise
    elif change == "add a name":
        (tree / "sys/bus/pci/devices/stray").write_text("x")
    else:
        manifest = next((tree / "var/lib/mokka/manifests").glob("pci.json"))
        manifest.write_text(manifest.read_text())
    node, _ = runs.plan(spec)
    claim = stage_cache.claim(entry.name)
    assert claim is not None
    try:
        assert claim.held_as_planned({name: plan_digest(plan) for name, plan in node.plans.items()}) == set()
    finally:
        claim.release()
    shown, full = runs.cached(spec)
    if change == "add a name":  # not the node's (staging removes only its own entries), shown as the tree has it
        assert shown.pop("sys/bus/pci/devices/stray")[0] == stat.S_IFREG
    assert shown == full


def owned_dirs(found: dict[str, list[object]]) -> set[str]:
    """The directories the manifests own, all together, dropped from them: which surface made a directory
    two surfaces stage into depends on which came first, in the tree a run started from."""
    dirs: set[str] = set()
    for path, (_, _, held) in found.items():
        if path.startswith("var/lib/mokka/manifests/") and isinstance(held, dict):
            dirs.update(held.pop("dirs"))
    return dirs


@needs_root
@pytest.mark.usefixtures("whole_node")
def test_a_tree_its_manifests_do_not_describe_is_not_shown_again(tmp_path: Path, cache: Path) -> None:
    runs, spec = Runs(tmp_path), NodeSpec(profile="h100", gpus=1)
    runs.cached(spec, "k")
    manifests = cache / "k" / stage_cache.TREE / "var/lib/mokka/manifests"
    next(manifests.iterdir()).write_text("{not json")
    shown, full = runs.cached(spec, "k")
    assert shown == full
    assert not (cache / "k").exists()
    shown, full = runs.cached(spec, "k")  # built anew
    assert shown == full
    assert [entry.name for entry in cache.iterdir()] == ["k"]


@needs_root
def test_where_the_overlay_is_refused_the_run_stages_in_full(tmp_path: Path, cache: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel without overlayfs in a user namespace (before 5.11): the tree is cached but not shown."""
    mount = namespace.mount

    def refuse_overlay(source: str | None, target: str, fstype: str | None, flags: int,
                       data: str | None = None) -> None:
        if fstype == "overlay":
            raise namespace.NamespaceError("mount overlay: Operation not permitted")
        mount(source, target, fstype, flags, data)

    monkeypatch.setattr(namespace, "mount", refuse_overlay)
    runs, spec = Runs(tmp_path), NodeSpec(profile="h100", gpus=1)
    for _ in range(2):
        shown, full = runs.cached(spec)
        assert shown == full and not runs.overlaid


def make_entry(cache: Path, name: str, age_s: float = 0.0) -> Path:
    entry = cache / name
    (entry / stage_cache.TREE).mkdir(parents=True)
    (entry / stage_cache.LOCK).touch()
    when = time.time() - age_s
    os.utime(entry, (when, when))
    return entry


def test_a_partial_entry_is_built_again(cache: Path) -> None:
    (cache / "k").mkdir(parents=True)  # killed before it was complete: no tree, no lock
    claim = stage_cache.claim("k")
    assert claim is not None and not claim.built
    assert not (cache / "k").exists()
    claim.release()
    assert list(cache.iterdir()) == []


def test_pruning_keeps_the_most_recently_used_and_every_held_entry(cache: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stage_cache, "MAX_ENTRIES", 2)
    for n in range(5):
        make_entry(cache, f"e{n}", age_s=100 - n)
    held = stage_cache.claim("e0")  # the oldest, in use by a run
    assert held is not None and held.built
    os.utime(cache / "e0", (time.time() - 200, time.time() - 200))
    killed = make_entry(cache, f"{stage_cache.BUILD_PREFIX}killed")  # a build whose run was killed
    running = make_entry(cache, f"{stage_cache.BUILD_PREFIX}running")  # one that is being built
    fd = os.open(running / stage_cache.LOCK, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_SH)
    stage_cache.prune(cache)
    assert sorted(entry.name for entry in cache.iterdir()) == sorted(["e0", "e3", "e4", running.name])
    assert not killed.exists()
    os.close(fd)
    held.release()
    stage_cache.prune(cache)
    assert sorted(entry.name for entry in cache.iterdir()) == ["e3", "e4"]


def test_the_key_names_the_node_its_surfaces_and_who_stages(monkeypatch: pytest.MonkeyPatch) -> None:
    base = stage_cache.key("node", ["gpu", "pci"])
    assert stage_cache.key("node", ["pci", "gpu"]) == base
    assert len({base, stage_cache.key("other", ["gpu", "pci"]), stage_cache.key("node", ["gpu"])}) == 3
    monkeypatch.setattr(os, "geteuid", lambda: 12345)
    assert stage_cache.key("node", ["gpu", "pci"]) != base  # device nodes are regular files without root
    monkeypatch.undo()
    old = os.umask(0o077)
    try:
        assert stage_cache.key("node", ["gpu", "pci"]) != base
    finally:
        os.umask(old)
