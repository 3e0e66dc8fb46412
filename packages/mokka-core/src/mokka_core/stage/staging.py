"""All-or-nothing staging of surface plans under a root, and teardown without residue.

A wave of plans is first materialised in a scratch directory inside the root (same
filesystem, so publishing is a series of ``rename`` calls).  Only when every plan
of the wave has been built is anything published; a failure while publishing
rolls back what was already moved.  Each surface's manifest lists exactly what
it created, so teardown removes that and nothing else.  Re-staging a surface
replaces its own files atomically and removes the ones its new plan dropped, and the
directories it created that the new plan no longer holds (once empty).  Every path under the root is
reached through :class:`.beneath.Beneath`, never through a link, and a record read back (a manifest, a
journal) is trusted only for plain relative paths.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import json
import os
import posixpath
import shutil
import stat
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from ..errors import MokkaError
from ..model.inputs import Fingerprint, fingerprint
from . import plan_memo
from .beneath import Beneath, UnsafePath
from .store import MANIFESTS_DIR, NodeStore, atomic_write, scratch_dir
from .surface import CharDevice, Copy, Dir, Entry, File, Runtime, Symlink


class StagingError(MokkaError):
    def __init__(self, surface: str, message: str) -> None:
        self.surface = surface
        super().__init__(f"surface {surface}: {message}")


class Manifest:
    """What one surface published under a root, so teardown removes exactly that."""

    __slots__ = ("digests", "dirs", "entries", "surface")

    def __init__(self, surface: str, entries: list[str] | None = None, dirs: list[str] | None = None,
                 digests: dict[str, str] | None = None) -> None:
        self.surface = surface
        self.entries = entries or []  # files, links, devices we created
        self.dirs = dirs or []  # directories we created, in creation order
        self.digests = digests or {}  # entry -> digest of what was published there

    @classmethod
    def load(cls, root: Path, surface: str) -> Manifest | None:
        path = NodeStore(root).manifest(surface)
        known = _MANIFESTS.get(str(path))
        if known is not None and known[0] == fingerprint(path):  # the one this process wrote last
            return known[1].copy()
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise StagingError(surface, f"manifest {path} is unreadable ({exc}); remove it by hand") from None
        try:
            entries, dirs, digests = data["entries"], data["dirs"], data.get("digests") or {}
            if not (type(entries) is list and type(dirs) is list and type(digests) is dict):
                raise TypeError("entries and dirs must be lists, digests a map")
        except (KeyError, TypeError) as exc:
            raise StagingError(surface, f"manifest {path} is malformed ({exc}); remove it by hand") from None
        for rel in [*entries, *dirs, *digests]:
            if not plain_path(rel):
                raise StagingError(surface, f"manifest {path} lists {rel!r}, which is not a plain relative path "
                                   "under the root (no '..', not absolute, no NUL): teardown refuses it. Mokka "
                                   "never writes such an entry; check what wrote the manifest, then remove it by hand")
        return cls(surface=surface, entries=entries, dirs=dirs, digests=digests)

    def save(self, root: Path, walk: Beneath | None = None) -> None:
        """Write the manifest; the directories made for it (the root's first one) are this surface's.
        ``walk``: the wave's handles on the root, else the root is opened here."""
        path = NodeStore(root).manifest(self.surface)
        _MANIFESTS.pop(str(path), None)
        made: list[str] = []
        if walk is None:
            with Beneath(root) as own:
                own.dir(MANIFESTS_DIR, made)  # never through a link on the way
        else:
            walk.dir(MANIFESTS_DIR, made)
        self.dirs.extend(d for d in made if d not in self.dirs)
        written = atomic_write(path, self._text())
        if written is not None:
            while len(_MANIFESTS) >= _MANIFEST_MEMO:
                _MANIFESTS.pop(next(iter(_MANIFESTS)))
            _MANIFESTS[str(path)] = (written, self.copy())

    def _text(self) -> str:
        return json.dumps({"surface": self.surface, "entries": self.entries, "dirs": self.dirs,
                           "digests": self.digests}, separators=(",", ":"))

    def copy(self) -> Manifest:
        return Manifest(self.surface, list(self.entries), list(self.dirs), dict(self.digests))


#: manifest file -> (its fingerprint, the manifest) for the last ones this process wrote: a process that
#: stages again and again (the node daemon, ``Node.ctl``) does not parse what it wrote itself; any other
#: writer's file has another fingerprint (as with the snapshot, ``snapshot._MEMO``)
_MANIFESTS: dict[str, tuple[Fingerprint, Manifest]] = {}
_MANIFEST_MEMO = 32


def staged_surfaces(root: Path) -> list[str]:
    try:
        names = os.listdir(NodeStore(root).manifests_dir)
    except OSError:
        return []
    return sorted(name[:-5] for name in names if name.endswith(".json") and not name.startswith("."))


def stage_wave(plans: dict[str, list[Entry]], root: Path, entry_digests: Mapping[str, list[str]] | None = None,
               trusted: Mapping[str, set[int]] | None = None) -> dict[str, Manifest]:
    """Stage every plan or none of them.  ``entry_digests``: each plan's ``entry_digest`` list, where the
    caller has them already (``render`` made the plans' digests from them).  ``trusted``: by surface, the
    indices of entries this process's last wave under ``root`` published as they are (``render``: the plan
    parts it took from the last render); they are kept where the manifest records the same digest, without
    looking for them on disk, so one removed by hand since comes back at the next full render, not now."""
    if not os.path.isdir(root):
        root.mkdir(mode=0o755, parents=True, exist_ok=True)
    _check_plans(plans)
    previous = {surface: Manifest.load(root, surface) for surface in plans}
    known = entry_digests or {}
    digests = {surface: list(known[surface]) if surface in known else [entry_digest(entry) for entry in plan]
               for surface, plan in plans.items()}
    vouched = trusted or {}
    unchanged = {surface: _unchanged(root, plan, digests[surface], previous[surface], vouched.get(surface))
                 for surface, plan in plans.items()}
    lone = _lone_replacement(plans, root, previous, unchanged)
    with Beneath(root) as walk:
        if lone is not None:
            return _stage_lone(plans, walk, previous, digests, unchanged, *lone)
        scratch = scratch_dir(root, SCRATCH_PREFIX)
        try:
            there = _write_journal(plans, root, scratch, previous, unchanged)
            _materialise_all(plans, str(scratch), unchanged)
            return _publish(plans, walk, previous, digests, unchanged, there,
                            lambda surface, n: os.path.join(scratch, surface, str(n)))
        finally:
            _remove_scratch(scratch, plans)


def _remove_scratch(scratch: Path, plans: dict[str, list[Entry]]) -> None:
    """Remove the wave's scratch directory: after a publish only the journal and the emptied surface
    directories are left (what a failed wave leaves is removed whole)."""
    try:
        os.unlink(scratch / JOURNAL)
        for surface, plan in plans.items():
            if plan:
                os.rmdir(scratch / surface)
        os.rmdir(scratch)
    except OSError:
        shutil.rmtree(scratch, ignore_errors=True)


# ---- the wave journal: what a SIGKILL in the middle of a wave leaves, for `down` and the next `up` ----

SCRATCH_PREFIX = ".mokka-stage-"
JOURNAL = "journal.json"  # in the wave's scratch directory, so it goes with it when the wave ends


def _write_journal(plans: dict[str, list[Entry]], root: Path, scratch: Path, previous: dict[str, Manifest | None],
                   unchanged: dict[str, set[int]]) -> set[str]:
    """Record, before anything is published, every path the wave may create: new entries, the backup and
    copy names beside replaced ones, and the directories that do not exist yet (outermost first).
    Returns the directories the wave's entries are in that exist (so publishing need not look again)."""
    paths: list[str] = []
    dirs: list[str] = []
    checked: set[str] = set()
    base = str(root)

    def missing_dirs(rel_dir: str) -> None:
        current = ""
        for part in rel_dir.split("/"):
            current = f"{current}/{part}" if current else part
            if part and current not in checked:
                checked.add(current)
                if not os.path.isdir(f"{base}/{current}"):
                    dirs.append(current)

    for surface, plan in plans.items():
        old = previous[surface]
        owned = set(old.entries) if old else set()
        same = unchanged[surface]
        for n, entry in enumerate(plan):
            if n in same:
                continue  # published already, so are the directories it is in
            head, _, name = entry.path.rpartition("/")
            if head:
                missing_dirs(head)
            if isinstance(entry, Dir):
                missing_dirs(entry.path)
            else:
                if entry.path not in owned and not os.path.lexists(f"{base}/{entry.path}"):
                    paths.append(entry.path)
                prefix = f"{head}/." if head else "."
                paths += [f"{prefix}{name}.mokka-old", f"{prefix}{name}.mokka-new"]
    atomic_write(scratch / JOURNAL, json.dumps({"paths": paths, "dirs": dirs}, separators=(",", ":")))
    return checked.difference(dirs)


def _lone_replacement(plans: dict[str, list[Entry]], root: Path, previous: dict[str, Manifest | None],
                      unchanged: dict[str, set[int]]) -> tuple[set[str], tuple[str, int] | None] | None:
    """A wave that replaces at most one file its surface owns and creates nothing: the directories its
    entry is in and the entry (surface, index; None where nothing is replaced).  It needs no journal, no
    backup and no scratch directory, as its one rename is atomic by itself (``_stage_lone``).  None for
    any other wave."""
    lone: tuple[str, int] | None = None
    for surface, plan in plans.items():
        same = unchanged[surface]
        for n, entry in enumerate(plan):
            if n in same or type(entry) is Runtime:  # a runtime file is recorded, never made by a wave
                continue
            if lone is not None:
                return None
            lone = (surface, n)
    if lone is None:
        return set(), None
    surface, n = lone
    entry, old = plans[surface][n], previous[surface]
    if type(entry) is Dir or old is None or entry.path not in old.digests:
        return None
    try:
        there = os.lstat(f"{root}/{entry.path}")
    except OSError:
        return None
    if stat.S_ISDIR(there.st_mode) or there.st_dev != os.stat(root).st_dev:  # rename(2) would not do
        return None
    head = entry.path.rpartition("/")[0]
    parts = head.split("/") if head else []
    return {"/".join(parts[:depth]) for depth in range(1, len(parts) + 1)}, lone


def _stage_lone(plans: dict[str, list[Entry]], walk: Beneath, previous: dict[str, Manifest | None],
                digests: dict[str, list[str]], unchanged: dict[str, set[int]], there: set[str],
                lone: tuple[str, int] | None) -> dict[str, Manifest]:
    """Publish a lone replacement: its entry is built as one file named like a scratch directory (so a kill
    before the rename leaves what ``recover`` removes), then renamed over the old one."""
    built = None
    if lone is not None:
        surface, n = lone
        built = f"{walk.root}/{SCRATCH_PREFIX}{os.urandom(6).hex()}"
        try:
            _materialise(plans[surface][n], built)
        except OSError as exc:
            _remove(built)
            raise StagingError(surface, f"cannot build /{plans[surface][n].path}: {exc.strerror or exc}") from None
    try:
        return _publish(plans, walk, previous, digests, unchanged, there, lambda _surface, _n: str(built),
                        rollback=False)
    finally:
        if built is not None and os.path.lexists(built):
            _remove(built)


def recover(root: Path) -> list[str]:
    """Remove what interrupted waves left under ``root``, as their journals list; returns what is still there.

    For `mokka node down` and a starting node, never while another writer stages under ``root``.
    Entries a saved manifest owns are left to teardown.  A wave whose leftovers cannot all be
    removed keeps its journal (listed in the result), so the next attempt finds them again.
    """
    owned: set[str] = set()
    for surface in staged_surfaces(root):
        try:
            manifest = Manifest.load(root, surface)
        except StagingError:
            continue
        if manifest is not None:
            owned |= {*manifest.entries, *manifest.dirs}
    still: list[str] = []
    scratches = sorted(root.glob(f"{SCRATCH_PREFIX}*"))
    if scratches:  # (the root is opened only then: it may not exist)
        with Beneath(root) as walk:
            for scratch in scratches:
                _recover_wave(walk, scratch, owned, still)
    return still


def _recover_wave(walk: Beneath, scratch: Path, owned: set[str], still: list[str]) -> None:
    """Remove what the interrupted wave of ``scratch`` left (``recover``), adding to ``still`` what stays."""
    if not scratch.is_dir() or scratch.is_symlink():  # a lone replacement's entry, killed before its rename
        try:
            scratch.unlink()
        except OSError as exc:
            still.append(f"/{scratch.name} ({exc.strerror})")
        return
    try:
        journal = json.loads((scratch / JOURNAL).read_text())
        paths, dirs = list(journal["paths"]), list(journal["dirs"])
    except FileNotFoundError:
        paths, dirs = [], []  # killed before its journal was written: nothing was published yet
    except (OSError, ValueError, KeyError, TypeError) as exc:
        still.append(f"{scratch.name} (unreadable journal: {exc})")
        return
    left = []
    for rel in paths:
        if not plain_path(rel) or rel in owned:
            continue
        try:
            walk.remove(rel)
        except UnsafePath as exc:
            left.append(str(exc))
        except OSError as exc:
            left.append(f"/{rel} ({exc.strerror})")
    try:
        _remove_empty_dirs(walk, [d for d in dirs if plain_path(d) and d not in owned])
    except UnsafePath as exc:
        left.append(str(exc))
    except OSError as exc:
        left.append(f"a directory of {scratch.name} ({exc.strerror})")
    if left:
        still += left
        return
    shutil.rmtree(scratch, ignore_errors=True)
    if scratch.exists():
        still.append(f"/{scratch.name}")


_DIGESTS: dict[tuple[type, Entry], str] = {}  # small entries' digests: a restage plans most of them again
_DIGEST_MEMO_MAX_BYTES = 4096
_DIGEST_MEMO_ENTRIES = 1 << 16


def entry_digest(entry: Entry) -> str:
    """What an entry publishes (type, mode, content or target), without its path; "" for a copy whose
    source cannot be read (it never matches, so building it reports the error)."""
    if type(entry) is Copy:  # its source may change under the same entry
        return _entry_digest(entry)
    if type(entry) is File and len(entry.content) > _DIGEST_MEMO_MAX_BYTES:
        return _large_digest(entry)
    key = (type(entry), entry)  # the type too: NamedTuples of the same fields compare equal
    found = _DIGESTS.get(key)
    if found is None:
        if len(_DIGESTS) >= _DIGEST_MEMO_ENTRIES:
            _DIGESTS.clear()
        found = _DIGESTS[key] = _entry_digest(entry)
    return found


def _large_digest(entry: File) -> str:
    """A large file's digest, kept for the very entry object (a plan part the last render built is taken as
    it is, ``plan_memo``): an equal one is hashed again, which costs less than comparing its content."""
    found = _LARGE_DIGESTS.get(id(entry))
    if found is not None and found[0] is entry:  # held here, so its id is not another object's
        return found[1]
    digest = _entry_digest(entry)
    while len(_LARGE_DIGESTS) >= _LARGE_DIGEST_ENTRIES:
        _LARGE_DIGESTS.pop(next(iter(_LARGE_DIGESTS)))
    _LARGE_DIGESTS[id(entry)] = (entry, digest)
    return digest


_LARGE_DIGESTS: dict[int, tuple[File, str]] = {}
_LARGE_DIGEST_ENTRIES = 16


def _entry_digest(entry: Entry) -> str:
    digest = hashlib.blake2b(digest_size=16)
    digest.update(f"{type(entry).__name__}\0{getattr(entry, 'mode', '')}\0".encode())
    if isinstance(entry, File):
        digest.update(entry.data())
    elif isinstance(entry, Copy):
        try:
            st = os.stat(entry.source)
        except OSError:
            return ""  # never matches: building it reports the error
        digest.update(f"{entry.source}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    elif isinstance(entry, Symlink):
        digest.update(entry.target.encode())
    elif isinstance(entry, CharDevice):
        digest.update(f"{entry.major}:{entry.minor}".encode())
    return digest.hexdigest()


def _unchanged(root: Path, plan: list[Entry], digests: list[str], old: Manifest | None,
               trusted: set[int] | None = None) -> set[int]:
    """Indices of entries already published with the same content, and of directories there already: a
    restage leaves them alone.  ``trusted``: see ``stage_wave``."""
    if old is None or not old.digests:
        return set()
    recorded = old.digests
    listed: dict[str, frozenset[str] | None] = {}  # each directory is listed once, not each entry stat'ed
    base = str(root)
    kept = set()
    dirs = []
    vouched = trusted or ()
    for n, entry in enumerate(plan):
        if type(entry) is Dir:
            if n in vouched:
                kept.add(n)
            else:
                dirs.append(n)
            continue
        if recorded.get(entry.path) != digests[n]:
            continue
        if n in vouched:
            kept.add(n)
            continue
        head, _, name = entry.path.rpartition("/")
        if head not in listed:
            listed[head] = _names(f"{base}/{head}" if head else base)
        names = listed[head]
        if names is not None and name in names:  # still there (a dangling link too): one removed behind our
            kept.add(n)  # back is published again
    for n in dirs:
        path = plan[n].path
        if listed.get(path) is not None or os.path.isdir(f"{base}/{path}"):  # listed: it is a directory
            kept.add(n)
    return kept


def _names(directory: str) -> frozenset[str] | None:
    """The names in ``directory`` (None where it cannot be listed).

    A directory's ctime moves with every name made, removed or renamed in it (and with any change of
    its times), so a listing stands while its device, inode and ctime are the same: a stat instead of
    a listing, for the many directories a restage leaves alone.  File times come from the kernel's
    coarse clock (one tick, a jiffy, is 10 ms at most), so a change within a tick of the last one may
    leave the ctime as it was: only a listing of a directory left alone for longer than that is kept.
    """
    try:
        st = os.stat(directory)
    except OSError:
        return None
    stamp = (st.st_dev, st.st_ino, st.st_ctime_ns)
    known = _LISTINGS.get(directory)
    if known is not None and known[0] == stamp:
        return known[1]
    now = time.time_ns()  # before the listing: what changes after may be missing from it, and moves the ctime
    try:
        names = frozenset(os.listdir(directory))
    except OSError:
        return None
    if st.st_ctime_ns < now - _SETTLED_NS:
        while len(_LISTINGS) >= _LISTING_MEMO:
            _LISTINGS.pop(next(iter(_LISTINGS)))
        _LISTINGS[directory] = (stamp, names)
    return names


#: directory -> ((device, inode, ctime), its names): listings of directories left alone for _SETTLED_NS
_LISTINGS: dict[str, tuple[tuple[int, int, int], frozenset[str]]] = {}
_LISTING_MEMO = 1024
_SETTLED_NS = 50_000_000  # five ticks of the coarsest kernel clock (HZ=100)


def _materialise_all(plans: dict[str, list[Entry]], scratch: str, skip: dict[str, set[int]]) -> None:
    """Build every surface's entries in the scratch area, one thread per surface.

    Creating files is syscall-bound (the GIL is released), so surfaces overlap;
    the first failure in plan order is reported, naming its surface.
    """
    errors: dict[str, StagingError] = {}

    def build(surface: str, plan: list[Entry]) -> None:
        base = os.path.join(scratch, surface)
        os.mkdir(base)
        for n, entry in enumerate(plan):
            if n in skip[surface]:
                continue
            try:
                _materialise(entry, os.path.join(base, str(n)))
            except OSError as exc:
                errors[surface] = StagingError(surface, f"cannot build /{entry.path}: {exc.strerror or exc}")
                return

    busy = [(surface, plan) for surface, plan in plans.items() if plan]
    if len(busy) > 1:
        threads = [threading.Thread(target=build, args=item, name=f"stage-{item[0]}") for item in busy]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    else:
        for item in busy:
            build(*item)
    for surface in plans:
        if surface in errors:
            raise errors[surface]


def teardown(root: Path, surface: str) -> bool:
    """Remove what ``surface`` staged under ``root``; False if it was not staged."""
    manifest = Manifest.load(root, surface)
    if manifest is None:
        return False
    with Beneath(root) as walk:
        refused = _remove_entries(walk, manifest.entries)
        if refused:  # the manifest stays, so that teardown finds the rest once the link is gone
            raise StagingError(surface, refused[0])
        NodeStore(root).manifest(surface).unlink(missing_ok=True)
        leftovers = _remove_empty_dirs(walk, manifest.dirs)
    if leftovers:
        _adopt_dirs(root, leftovers)
    return True


def _remove_entries(walk: Beneath, entries: list[str]) -> list[str]:
    """Remove ``entries``, last first; returns the refusals (a link on the way to one: nothing through it)."""
    refused = []
    for rel in reversed(entries):
        try:
            walk.remove(rel)
        except UnsafePath as exc:
            refused.append(str(exc))
    return refused


def teardown_all(root: Path) -> list[str]:
    """Remove what every surface staged under ``root`` in one pass (no directory changes hands); returns them.

    A surface whose manifest cannot be read is left in place (and named in the error raised at the end).
    """
    plan_memo.forget(root)
    left = recover(root)
    manifests, unreadable = {}, []
    for surface in staged_surfaces(root):
        try:
            manifest = Manifest.load(root, surface)
        except StagingError as exc:
            unreadable.append(exc)
            continue
        if manifest is not None:
            manifests[surface] = manifest
    if manifests:  # (the root is opened only then: it may be gone)
        with Beneath(root) as walk:
            for surface, manifest in list(manifests.items()):
                refused = _remove_entries(walk, manifest.entries)
                if refused:  # its manifest stays, so that teardown finds the rest once the link is gone
                    unreadable.append(StagingError(surface, refused[0]))
                    del manifests[surface]
            for surface in manifests:
                NodeStore(root).manifest(surface).unlink(missing_ok=True)
            _remove_empty_dirs(walk, [d for manifest in manifests.values() for d in manifest.dirs])
    if unreadable:
        raise unreadable[0]
    if left:
        raise StagingError("staging", "an interrupted wave left what could not be removed: " + ", ".join(left))
    return list(manifests)


@functools.lru_cache(maxsize=1 << 16)
def _normal_relative(path: str) -> bool:
    """Relative, normalised (no ``.``/``..``/empty parts, no trailing slash, no NUL): string checks only, it
    is hot."""
    return bool(path) and path[0] != "/" and posixpath.normpath(path) == path and path != ".." \
        and not path.startswith("../") and "\0" not in path


def plain_path(path: object) -> bool:
    """A plain relative path under the root, as a record read back (a manifest, a journal, the run state)
    must hold: a string, relative, normalised, no ``..``, no NUL."""
    return type(path) is str and _normal_relative(path)



def _check_plans(plans: dict[str, list[Entry]]) -> None:
    owners: dict[str, str] = {}
    for surface, plan in plans.items():
        for entry in plan:
            path = entry.path
            if not _normal_relative(path):
                raise StagingError(surface, f"plan path {entry.path!r} must be relative, normalised, inside the root")
            if isinstance(entry, Dir):
                continue
            if entry.path in owners:
                raise StagingError(surface, f"/{entry.path} is also staged by surface {owners[entry.path]}")
            owners[entry.path] = surface


def _materialise(entry: Entry, path: str) -> None:
    if isinstance(entry, (Dir, Runtime)):
        return  # directories are made in place when publishing; runtime files by the node itself
    if isinstance(entry, File):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            data = memoryview(entry.data())
            while data:
                data = data[os.write(fd, data):]
            os.fchmod(fd, entry.mode)  # exact mode, whatever the umask
        finally:
            os.close(fd)
    elif isinstance(entry, Copy):
        shutil.copy2(entry.source, path)
        if entry.mode is not None:
            os.chmod(path, entry.mode)
    elif isinstance(entry, Symlink):
        os.symlink(entry.target, path)
    elif isinstance(entry, CharDevice):
        try:
            os.mknod(path, stat.S_IFCHR | entry.mode, os.makedev(entry.major, entry.minor))
            os.chmod(path, entry.mode)
        except PermissionError:
            # without CAP_MKNOD (unprivileged tests) an empty file keeps the name visible
            import logging  # only here, and in the snapshot's rare warning: nvml-mock-ctl never loads it otherwise

            logging.getLogger(__name__).warning("no permission to create device node /%s; staging an empty file "
                                                "instead", entry.path)
            with open(path, "wb"):
                pass
            os.chmod(path, entry.mode)


def _publish(plans: dict[str, list[Entry]], walk: Beneath, previous: dict[str, Manifest | None],
             digests: dict[str, list[str]], unchanged: dict[str, set[int]], there: set[str],
             built: Callable[[str, int], str], rollback: bool = True) -> dict[str, Manifest]:
    """Move the wave into place, each entry from where it was ``built`` (by surface and index), every path
    reached through ``walk`` (never through a link); ``rollback`` False: a lone replacement
    (``_lone_replacement``), whose rename leaves nothing to undo."""
    done: list[tuple[str, str | None]] = []  # (target, backup of what it replaced), relative to the root
    created_dirs: list[str] = []
    known_dirs = set(there)  # relative dirs known to exist, so each is checked once per wave
    manifests: dict[str, Manifest] = {}
    try:
        for surface, plan in plans.items():
            old = previous[surface]
            owned = set(old.entries) if old else set()
            manifest = Manifest(surface, dirs=list(old.dirs) if old else [])
            same = unchanged[surface]
            for n, entry in enumerate(plan):
                if n in same:  # published already, in directories that exist
                    if type(entry) is not Dir:
                        manifest.digests[entry.path] = digests[surface][n]
                        manifest.entries.append(entry.path)
                    continue
                made: list[str] = []
                parent, name = walk.parent(entry.path, made)
                if isinstance(entry, Dir) and entry.path not in known_dirs:
                    walk.dir(entry.path, made, entry.mode)
                created_dirs.extend(made)
                manifest.dirs.extend(made)
                if isinstance(entry, Dir):
                    known_dirs.add(entry.path)
                    continue
                manifest.digests[entry.path] = digests[surface][n]
                if isinstance(entry, Runtime):
                    manifest.entries.append(entry.path)
                    continue
                backup = None
                if rollback and _lexists(parent, name):
                    if entry.path not in owned:
                        raise StagingError(surface, f"/{entry.path} already exists and is not Mokka's")
                    backup = _keep_for_rollback(walk, entry.path)
                # rename(2) replaces a file atomically: a reader sees the old or the new one, never neither
                _move_into_place(built(surface, n), parent, name)
                if rollback:
                    done.append((entry.path, backup))
                manifest.entries.append(entry.path)
            manifests[surface] = manifest
    except BaseException:
        for target, backup in reversed(done):
            if backup is None or _is_dir(walk, target):
                walk.remove(target)
            if backup is not None:
                walk.rename(backup, target)
        _remove_empty_dirs(walk, created_dirs)
        raise
    for _, backup in done:
        if backup is not None:
            walk.remove(backup)
    for surface, manifest in manifests.items():
        old = previous[surface]
        if old is not None:
            for rel in set(old.entries) - set(manifest.entries):
                walk.remove(rel)
    _remove_unplanned_dirs(walk, {surface: manifest for surface, manifest in manifests.items()
                                  if previous[surface] is not None}, plans)
    for manifest in manifests.values():
        manifest.save(Path(walk.root), walk)
    return manifests


def _lexists(parent: int, name: str) -> bool:
    try:
        os.lstat(name, dir_fd=parent)
    except FileNotFoundError:
        return False
    return True


def _is_dir(walk: Beneath, rel: str) -> bool:
    parent, name = walk.parent(rel)
    try:
        return stat.S_ISDIR(os.lstat(name, dir_fd=parent).st_mode)
    except FileNotFoundError:
        return False


def _remove_unplanned_dirs(walk: Beneath, manifests: dict[str, Manifest], plans: dict[str, list[Entry]]) -> None:
    """Remove the directories each surface created that its new plan no longer holds, where empty: all
    surfaces' together, deepest first, once every dropped entry is gone (one surface's directory may hold
    another's)."""
    unplanned: dict[str, list[str]] = {}
    for surface, manifest in manifests.items():
        planned: set[str] = set()
        for entry in plans[surface]:  # plan paths are normalised (_check_plans): parents by string, it is hot
            path = entry.path if type(entry) is Dir else entry.path.rpartition("/")[0]
            while path and path not in planned:
                planned.add(path)
                path = path.rpartition("/")[0]
        dropped = [rel for rel in manifest.dirs if rel not in planned]
        if dropped:
            unplanned[surface] = dropped
    if not unplanned:
        return
    every = [rel for dropped in unplanned.values() for rel in dropped]
    removed = set(every) - set(_remove_empty_dirs(walk, every))
    for surface in unplanned:
        manifests[surface].dirs = [rel for rel in manifests[surface].dirs if rel not in removed]


def _move_into_place(source: str, parent: int, name: str) -> None:
    """rename(2) ``source`` over ``name`` in the directory ``parent``; across filesystems, copy beside the
    target first, then rename."""
    try:
        os.rename(source, name, dst_dir_fd=parent)
        return
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
    # the target directory is a bind mount of another filesystem (e.g. the host's /var/run/cdi)
    tmp = f".{name}.mokka-new"
    _remove_at(parent, tmp)
    info = os.lstat(source)
    if stat.S_ISLNK(info.st_mode):
        os.symlink(os.readlink(source), tmp, dir_fd=parent)
    elif stat.S_ISCHR(info.st_mode):
        os.mknod(tmp, info.st_mode, info.st_rdev, dir_fd=parent)
    else:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=parent)
        with open(source, "rb") as data, os.fdopen(fd, "wb") as out:
            shutil.copyfileobj(data, out)
            os.fchmod(out.fileno(), stat.S_IMODE(info.st_mode))
            os.utime(out.fileno(), ns=(info.st_atime_ns, info.st_mtime_ns))
    os.rename(tmp, name, src_dir_fd=parent, dst_dir_fd=parent)
    os.unlink(source)


def _keep_for_rollback(walk: Beneath, target: str) -> str:
    """Keep what ``target`` is now under a backup name, leaving ``target`` in place where possible; returns
    the backup (relative to the root).

    Files, links and device nodes get a second hard link, so the new entry can be
    renamed straight over the old one; a directory has to be moved out of the way.
    """
    head, _, name = target.rpartition("/")
    backup = f"{head}/.{name}.mokka-old" if head else f".{name}.mokka-old"
    walk.remove(backup)
    if _is_dir(walk, target):
        walk.rename(target, backup)
        return backup
    parent = walk.dir(head)
    try:
        os.link(name, f".{name}.mokka-old", src_dir_fd=parent, dst_dir_fd=parent, follow_symlinks=False)
    except OSError:  # a filesystem without hard links: fall back to moving it away
        walk.rename(target, backup)
    return backup


def _remove(path: str | Path) -> None:
    """Remove ``path`` in Mokka's own scratch area (paths under the root go through ``Beneath.remove``)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        shutil.rmtree(path, ignore_errors=True)
    except PermissionError:  # unlink(2) of a directory reports EPERM on some systems
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            raise


def _remove_at(parent: int, name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=parent)


def _remove_empty_dirs(walk: Beneath, dirs: list[str]) -> list[str]:
    """Remove the listed directories deepest first if empty; return those still in use."""
    kept = []
    for rel in sorted(set(dirs), key=lambda d: d.count("/"), reverse=True):
        try:
            walk.rmdir(rel)
        except FileNotFoundError:
            pass
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                kept.append(rel)
            else:
                raise
    return kept


def _adopt_dirs(root: Path, dirs: list[str]) -> None:
    """Hand directories still shared with other surfaces to them, so the last teardown removes them."""
    for surface in staged_surfaces(root):
        manifest = Manifest.load(root, surface)
        if manifest is not None:
            manifest.dirs = sorted(set(manifest.dirs) | set(dirs), key=lambda d: d.count("/"))
            manifest.save(root)
