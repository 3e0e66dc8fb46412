"""All-or-nothing staging of surface plans under a root, and teardown without residue.

A wave of plans is first materialised in a scratch directory inside the root (same
filesystem, so publishing is a series of ``rename`` calls).  Only when every plan
of the wave has been built is anything published; a failure while publishing
rolls back what was already moved.  Each surface's manifest lists exactly what
it created, so teardown removes that and nothing else.  Re-staging a surface
replaces its own files atomically and removes the ones its new plan dropped.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from .errors import MokkaError
from .surface import CharDevice, Copy, Dir, Entry, File, Symlink

log = logging.getLogger(__name__)

MANIFEST_DIR = "var/lib/mokka/manifests"


class StagingError(MokkaError):
    def __init__(self, surface: str, message: str) -> None:
        self.surface = surface
        super().__init__(f"surface {surface}: {message}")


@dataclass
class Manifest:
    surface: str
    entries: list[str] = field(default_factory=list)  # files, links, devices we created
    dirs: list[str] = field(default_factory=list)  # directories we created, in creation order

    @classmethod
    def load(cls, root: Path, surface: str) -> Manifest | None:
        path = manifest_path(root, surface)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise StagingError(surface, f"manifest {path} is unreadable ({exc}); remove it by hand") from None
        return cls(surface=surface, entries=list(data["entries"]), dirs=list(data["dirs"]))

    def save(self, root: Path) -> None:
        path = manifest_path(root, self.surface)
        self.dirs.extend(d for d in _make_parents(root, path.parent.relative_to(root).as_posix()) if d not in self.dirs)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"surface": self.surface, "entries": self.entries, "dirs": self.dirs}, indent=1))
        os.replace(tmp, path)


def manifest_path(root: Path, surface: str) -> Path:
    return root / MANIFEST_DIR / f"{surface}.json"


def staged_surfaces(root: Path) -> list[str]:
    directory = root / MANIFEST_DIR
    return sorted(p.stem for p in directory.glob("*.json")) if directory.is_dir() else []


def stage_wave(plans: dict[str, list[Entry]], root: Path) -> dict[str, Manifest]:
    """Stage every plan or none of them."""
    root.mkdir(parents=True, exist_ok=True)
    _check_plans(plans)
    scratch = Path(tempfile.mkdtemp(prefix=".mokka-stage-", dir=root))
    try:
        for surface, plan in plans.items():
            for n, entry in enumerate(plan):
                try:
                    _materialise(entry, scratch / surface / str(n))
                except OSError as exc:
                    raise StagingError(surface, f"cannot build /{entry.path}: {exc.strerror or exc}") from None
        return _publish(plans, root, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def teardown(root: Path, surface: str) -> bool:
    """Remove what ``surface`` staged under ``root``; False if it was not staged."""
    manifest = Manifest.load(root, surface)
    if manifest is None:
        return False
    for rel in reversed(manifest.entries):
        _remove(root / rel)
    manifest_path(root, surface).unlink(missing_ok=True)
    leftovers = _remove_empty_dirs(root, manifest.dirs)
    if leftovers:
        _adopt_dirs(root, leftovers)
    return True


def _check_plans(plans: dict[str, list[Entry]]) -> None:
    owners: dict[str, str] = {}
    for surface, plan in plans.items():
        for entry in plan:
            path = PurePosixPath(entry.path)
            if path.is_absolute() or ".." in path.parts or not path.parts or str(path) != entry.path:
                raise StagingError(surface, f"plan path {entry.path!r} must be relative, normalised, inside the root")
            if isinstance(entry, Dir):
                continue
            if entry.path in owners:
                raise StagingError(surface, f"/{entry.path} is also staged by surface {owners[entry.path]}")
            owners[entry.path] = surface


def _materialise(entry: Entry, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(entry, Dir):
        path.mkdir(mode=entry.mode)
    elif isinstance(entry, File):
        path.write_bytes(entry.data())
        path.chmod(entry.mode)
    elif isinstance(entry, Copy):
        shutil.copy2(entry.source, path)
        if entry.mode is not None:
            path.chmod(entry.mode)
    elif isinstance(entry, Symlink):
        os.symlink(entry.target, path)
    elif isinstance(entry, CharDevice):
        try:
            os.mknod(path, stat.S_IFCHR | entry.mode, os.makedev(entry.major, entry.minor))
            path.chmod(entry.mode)
        except PermissionError:
            # without CAP_MKNOD (unprivileged tests) an empty file keeps the name visible
            log.warning("no permission to create device node /%s; staging an empty file instead", entry.path)
            path.write_bytes(b"")
            path.chmod(entry.mode)


def _publish(plans: dict[str, list[Entry]], root: Path, scratch: Path) -> dict[str, Manifest]:
    previous = {surface: Manifest.load(root, surface) for surface in plans}
    done: list[tuple[Path, Path | None]] = []  # (target, backup of what it replaced)
    created_dirs: list[str] = []
    manifests: dict[str, Manifest] = {}
    try:
        for surface, plan in plans.items():
            old = previous[surface]
            owned = set(old.entries) if old else set()
            manifest = Manifest(surface, dirs=list(old.dirs) if old else [])
            for n, entry in enumerate(plan):
                target = root / entry.path
                new_dirs = _make_parents(root, str(PurePosixPath(entry.path).parent))
                created_dirs.extend(new_dirs)
                manifest.dirs.extend(new_dirs)
                if isinstance(entry, Dir):
                    if not target.is_dir():
                        target.mkdir(mode=entry.mode)
                        created_dirs.append(entry.path)
                        manifest.dirs.append(entry.path)
                    continue
                backup = None
                if target.exists() or target.is_symlink():
                    if entry.path not in owned:
                        raise StagingError(surface, f"/{entry.path} already exists and is not Mokka's")
                    backup = _keep_for_rollback(target)
                # rename(2) replaces a file atomically: a reader sees the old or the new one, never neither
                os.rename(scratch / surface / str(n), target)
                done.append((target, backup))
                manifest.entries.append(entry.path)
            manifests[surface] = manifest
    except BaseException:
        for target, backup in reversed(done):
            if backup is None or (target.is_dir() and not target.is_symlink()):
                _remove(target)
            if backup is not None:
                os.rename(backup, target)
        _remove_empty_dirs(root, created_dirs)
        raise
    for _, backup in done:
        if backup is not None:
            _remove(backup)
    for surface, manifest in manifests.items():
        old = previous[surface]
        if old is not None:
            for rel in set(old.entries) - set(manifest.entries):
                _remove(root / rel)
        manifest.save(root)
    return manifests


def _keep_for_rollback(target: Path) -> Path:
    """Keep what ``target`` is now under a backup name, leaving ``target`` in place where possible.

    Files, links and device nodes get a second hard link, so the new entry can be
    renamed straight over the old one; a directory has to be moved out of the way.
    """
    backup = target.with_name(f".{target.name}.mokka-old")
    _remove(backup)
    if target.is_dir() and not target.is_symlink():
        os.rename(target, backup)
        return backup
    try:
        os.link(target, backup, follow_symlinks=False)
    except OSError:  # a filesystem without hard links: fall back to moving it away
        os.rename(target, backup)
    return backup


def _make_parents(root: Path, rel_dir: str) -> list[str]:
    """Create missing directories of ``rel_dir`` under root; return the ones created, outermost first."""
    created = []
    current = root
    for part in PurePosixPath(rel_dir).parts:
        if part in (".", ""):
            continue
        current = current / part
        if not current.is_dir():
            current.mkdir()
            created.append(current.relative_to(root).as_posix())
    return created


def _remove(path: Path) -> None:
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    except FileNotFoundError:
        pass


def _remove_empty_dirs(root: Path, dirs: list[str]) -> list[str]:
    """Remove the listed directories deepest first if empty; return those still in use."""
    kept = []
    for rel in sorted(set(dirs), key=lambda d: d.count("/"), reverse=True):
        try:
            (root / rel).rmdir()
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
