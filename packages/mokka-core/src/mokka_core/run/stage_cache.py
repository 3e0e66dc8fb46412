"""The staged tree ``mokka run`` shows its node from, kept in Mokka's cache so a run of the same node
writes only what differs.

An entry (``staged/<key>/``) holds ``tree/``, a node staged by ``stage_wave`` (its entries, their
directories and the surfaces' manifests, nothing else), and ``lock``.  A run shows the tree through an
overlay (the tree below, the run's private tmpfs above) and stages its own plans onto it with the same
``stage_wave`` that restages any node: the manifests record each entry's digest, so what this run plans
differently (what names the run's root, the boot time) is written into the upper layer, the rest is
shown as it is.  Which tree a run starts from is therefore never a question of correctness, only of how
much it writes; the key (:func:`key`) names the node and what the digests do not see: whether device
nodes can be made (root) and the umask the directories were made under.

An entry is built under a temporary name and renamed into place only once complete, sealed and synced, so
a partial one is never seen.  The seal records each surface's plan digest and the stat of the tree's
directories and manifests: while they are as sealed, a run stages only the surfaces whose plans differ
(those that name its root), and leaves the others alone without comparing their entries one by one.
Every run holds a shared lock on its entry from before the tree is shown until it ends; pruning (beyond
:data:`MAX_ENTRIES`) removes only entries it can lock exclusively.
Everything here is a cache: any failure to read or write it costs only time.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import hashlib
import json
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from ..errors import MokkaError
from ..stage.paths import user_cache
from ..stage.staging import Manifest
from ..stage.store import NodeStore, atomic_write
from ..stage.surface import CharDevice, Dir, Entry

FORMAT_VERSION = 2  # 2: entries are sealed (SEAL)
CACHE_DIR = "staged"
TREE = "tree"
LOCK = "lock"
SEAL = "seal.json"  # the tree as published: each surface's plan digest; its directories' and manifests' stat
WRITTEN = "written.json"  # what the last run that showed the tree wrote over it: {path: digest, "" removed}
BUILD_PREFIX = ".build-"
TRASH_PREFIX = ".trash-"
#: entries kept (the most recently used): each is a whole node (a few MB)
MAX_ENTRIES = 8
#: a build without its lock file yet, younger than this, may be one that is just starting
BUILD_GRACE_S = 60.0


def key(resolved_key: str, surfaces: Iterable[str]) -> str:
    """The entry for a node (``run.resolved.key`` of its spec) staged with ``surfaces`` by this user and umask."""
    umask = os.umask(0o022)
    os.umask(umask)
    facts = [FORMAT_VERSION, resolved_key, sorted(surfaces), os.geteuid() == 0, umask]
    return hashlib.sha256(json.dumps(facts).encode()).hexdigest()[:32]


class Claim:
    """A cache entry this process holds a shared lock on until :meth:`release`: complete (``built``), or a
    build directory the run stages its tree into and then :meth:`publish`es under the entry's name."""

    def __init__(self, directory: Path, final: Path, fd: int, built: bool) -> None:
        self.directory = directory
        self.final = final
        self.fd = fd
        self.built = built

    @property
    def tree(self) -> Path:
        return self.directory / TREE

    def publish(self, plans: Mapping[str, list[Entry]], digests: Mapping[str, str]) -> Path:
        """Once the build's tree is staged (``plans``, of plan ``digests``): seal it, sync it and give it the
        entry's name; the tree to show.

        A tree whose device nodes were made as regular files (root without CAP_MKNOD) is shown to this run
        only: the key says device nodes.  A run that published the same entry first wins; this one shows
        its own build, which :meth:`release` removes.
        """
        if os.geteuid() == 0 and not _devices_made(self.tree, plans):
            return self.tree
        atomic_write(self.directory / SEAL, json.dumps({"plans": dict(digests), "stats": _tree_stats(self.tree)}))
        _syncfs(self.fd)
        try:
            os.rename(self.directory, self.final)
        except OSError:
            return self.tree
        self.directory = self.final
        prune(self.final.parent)
        return self.tree

    def held_as_planned(self, digests: Mapping[str, str]) -> set[str]:
        """The surfaces the tree holds exactly as planned (by plan ``digests``): staging can leave them alone.

        Only while the tree is as it was sealed: a name made, removed or renamed in any of its directories
        moves that directory's ctime, and a manifest written moves its own (a change within one tick of the
        kernel's coarse clock after the seal could go unseen).  Otherwise none: staging then compares every
        entry, as for a tree of another node.
        """
        try:
            seal = json.loads((self.directory / SEAL).read_text())
            planned, stats = seal["plans"], seal["stats"]
            if any(_stat(self.tree / path) != held for path, held in stats.items()):
                return set()
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return set()
        return {surface for surface, digest in digests.items() if planned.get(surface) == digest}

    def judge(self, plans: Mapping[str, list[Entry]], digests: Mapping[str, list[str]]) -> None:
        """After a run staged ``plans`` (their entries' ``digests``) onto the tree: was the tree stale?

        What a run writes over the tree because it names the run's root or its boot time differs from
        one run to the next; an entry the last run wrote the same way is one the tree is stale in (an
        input changed since it was built: the native bundle rebuilt, nvidia-smi fetched), and the tree is
        discarded, so the next run builds it anew.  Otherwise what this run wrote is recorded for the next.
        """
        try:
            written = _written(self.tree, plans, digests)
        except (MokkaError, OSError):
            self.discard()
            return
        try:
            last = json.loads((self.directory / WRITTEN).read_text())
        except (OSError, ValueError):
            last = {}
        if isinstance(last, dict) and any(last.get(path) == digest for path, digest in written.items()):
            self.discard()
            return
        with contextlib.suppress(OSError):
            atomic_write(self.directory / WRITTEN, json.dumps(written, sort_keys=True))

    def discard(self) -> None:
        """No later run shows this tree (stale, or not what its manifests say): the entry loses its name, and
        goes once no run holds it (``prune``)."""
        with contextlib.suppress(OSError):
            if os.fstat(self.fd).st_ino == os.stat(self.final / LOCK).st_ino:  # the entry is still this one
                os.rename(self.final, self.final.with_name(f"{TRASH_PREFIX}{os.urandom(6).hex()}"))

    def release(self) -> None:
        """Let go of the entry (after the run); a build that was not published is removed."""
        with contextlib.suppress(OSError):
            os.close(self.fd)
        if not self.built and self.directory.name.startswith(BUILD_PREFIX):
            shutil.rmtree(self.directory, ignore_errors=True)


def claim(entry_key: str) -> Claim | None:
    """The entry ``entry_key``, locked (shared): complete where it exists, else a fresh build directory;
    None where the cache cannot be used."""
    parent = user_cache(CACHE_DIR)
    final = parent / entry_key
    fd = _locked(final, fcntl.LOCK_SH)
    if fd is not None:
        with contextlib.suppress(OSError):
            os.utime(final)  # most recently used: the last to be pruned
        return Claim(final, final, fd, built=True)
    if os.path.lexists(final):  # partial: removed unless a run holds it
        _remove_unheld(final)
    try:
        parent.mkdir(parents=True, exist_ok=True)
        build = Path(tempfile.mkdtemp(prefix=BUILD_PREFIX, dir=parent))
        fd = os.open(build / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_SH)
        (build / TREE).mkdir()
    except OSError:
        return None
    return Claim(build, final, fd, built=False)


def _locked(directory: Path, operation: int) -> int | None:
    """An fd of ``directory``'s lock, locked with ``operation``; None where there is no such entry (any more:
    one pruned while we waited for the lock has lost its name)."""
    try:
        fd = os.open(directory / LOCK, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, operation)
        if os.fstat(fd).st_ino == os.stat(directory / LOCK).st_ino and (directory / TREE).is_dir():
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def prune(parent: Path) -> None:
    """Remove all but the :data:`MAX_ENTRIES` most recently used entries, and what killed runs left (builds,
    trash); an entry or build a run holds stays."""
    entries, left = [], []
    with contextlib.suppress(OSError):
        for item in os.scandir(parent):
            with contextlib.suppress(OSError):
                if item.name.startswith(TRASH_PREFIX):
                    left.append(Path(item.path))
                elif item.name.startswith(BUILD_PREFIX):
                    if os.path.exists(f"{item.path}/{LOCK}") or time.time() - item.stat().st_mtime > BUILD_GRACE_S:
                        left.append(Path(item.path))
                elif item.is_dir(follow_symlinks=False):
                    entries.append((item.stat(follow_symlinks=False).st_mtime_ns, Path(item.path)))
    for _, entry in sorted(entries, reverse=True)[MAX_ENTRIES:]:
        _remove_unheld(entry)
    for directory in left:
        _remove_unheld(directory)


def _remove_unheld(directory: Path) -> None:
    """Remove an entry, build or discarded entry unless a run holds its lock: its name goes first (under the
    lock), so a run that opened the lock before finds no entry (``_locked``), then its files."""
    fd = None
    try:
        fd = os.open(directory / LOCK, os.O_RDONLY | os.O_CLOEXEC)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except FileNotFoundError:
        pass  # no lock: nobody can hold it (a build without one is past its grace)
    except OSError:
        if fd is not None:
            os.close(fd)
        return  # held by a run
    try:
        trash = directory.with_name(f"{TRASH_PREFIX}{os.urandom(6).hex()}")
        os.rename(directory, trash)
    except OSError:
        return
    finally:
        if fd is not None:
            os.close(fd)
    _make_removable(trash)
    shutil.rmtree(trash, ignore_errors=True)


def _make_removable(directory: Path) -> None:
    """Without root a staged directory without write permission keeps its entries: give it that first."""
    if os.geteuid() == 0:
        return
    for path, dirs, _ in os.walk(directory):
        for name in dirs:
            with contextlib.suppress(OSError):
                mode = os.lstat(os.path.join(path, name)).st_mode
                if not mode & stat.S_IWUSR:
                    os.chmod(os.path.join(path, name), stat.S_IMODE(mode) | stat.S_IRWXU)


def _written(tree: Path, plans: Mapping[str, list[Entry]], digests: Mapping[str, list[str]]) -> dict[str, str]:
    """The entries staging ``plans`` over ``tree`` wrote (by digest), and removed ("")."""
    written: dict[str, str] = {}
    for surface, plan in plans.items():
        old = Manifest.load(tree, surface)
        recorded = old.digests if old is not None else {}
        for entry, digest in zip(plan, digests[surface], strict=True):
            if type(entry) is not Dir and recorded.get(entry.path) != digest:
                written[entry.path] = digest
        if old is not None:
            written.update(dict.fromkeys(set(old.entries).difference(entry.path for entry in plan), ""))
    return written


def _tree_stats(tree: Path) -> dict[str, list[int]]:
    """Every directory of ``tree`` and every manifest in it, by path: [inode, ctime]."""
    stats = {}
    for directory, _, _ in os.walk(tree):
        stats[os.path.relpath(directory, tree)] = _stat(Path(directory))
    manifests = NodeStore(tree).manifests_dir
    for name in os.listdir(manifests):
        stats[os.path.relpath(manifests / name, tree)] = _stat(manifests / name)
    return stats


def _stat(path: Path) -> list[int]:
    st = os.lstat(path)
    return [st.st_ino, st.st_ctime_ns]


def _devices_made(tree: Path, plans: Mapping[str, list[Entry]]) -> bool:
    """Whether every device node of the plans is one in ``tree`` (not the regular file made without CAP_MKNOD)."""
    for plan in plans.values():
        for entry in plan:
            if type(entry) is CharDevice:
                try:
                    if not stat.S_ISCHR(os.lstat(tree / entry.path).st_mode):
                        return False
                except OSError:
                    return False
    return True


def _syncfs(fd: int) -> None:
    """What was written on the cache's filesystem reaches the disk before the entry gets its name (a crash
    then leaves no entry with empty files)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syncfs(fd) != 0:
        raise OSError(ctypes.get_errno(), "syncfs")
