"""A node root no other user controls, and paths under it walked from directory handles, never through a link.

:func:`check_root` refuses a root that another user could change, or any directory on the way to it, as
sshd's StrictModes refuses a writable home.  :class:`Beneath` holds the root open: staging and teardown
reach every path under it one directory handle at a time (``openat2`` with ``RESOLVE_BENEATH |
RESOLVE_NO_SYMLINKS`` where the kernel has it, ``O_NOFOLLOW`` otherwise), so a link planted on the way
(``usr`` -> /etc) or re-pointed before teardown stops the walk (:class:`UnsafePath`) instead of leading
outside the root.  A link as the last component is an entry like any other: made, replaced or removed itself.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import stat
from pathlib import Path

from ..errors import MokkaError


class UnsafePath(MokkaError):
    """A root another user could change, or a path under it that leads through a link."""


def check_root(root: Path, uid: int | None = None) -> None:
    """Refuse ``root`` and every existing directory on the way to it unless owned by ``uid`` (default: this
    process's) or by root, and writable by nobody else; an ancestor may be a root-owned sticky directory
    (``/tmp``).  A link on the way must be owned by them too, and what it leads to is checked as well."""
    owner = os.geteuid() if uid is None else uid
    path = Path(os.path.abspath(root))
    checked = [*reversed(path.parents), path]
    for n, each in enumerate(checked):
        try:
            st = os.lstat(each)
        except FileNotFoundError:
            return  # what is missing, Mokka makes (``make_root``)
        if stat.S_ISLNK(st.st_mode):
            if st.st_uid not in (owner, 0):
                raise _unsafe(each, st, "is a symbolic link owned by another user, who can point it elsewhere")
            check_root(Path(os.path.realpath(each)), owner)
            continue
        problem = _problem(st, owner, ancestor=n < len(checked) - 1)
        if problem:
            raise _unsafe(each, st, problem)


def make_root(root: Path) -> None:
    """Check ``root`` (:func:`check_root`), then make what is missing of it, writable by its owner only.  An
    existing root of the caller's that is empty and writable by others (a container's emptyDir volume, mode 0777)
    is made writable by its owner only first: once nobody else can add to it, an empty root holds nothing of
    theirs."""
    path = Path(os.path.abspath(root))
    _claim_empty(path)
    check_root(root)
    for each in [*reversed(path.parents), path]:
        try:
            os.mkdir(each, 0o755)
        except FileExistsError:
            continue
        except OSError as exc:
            raise MokkaError(f"cannot make the node root {root}: {exc.strerror} ({each}); the root must be "
                             "writable") from None
    check_root(root)  # what we made, or what another made first


def _claim_empty(path: Path) -> None:
    try:
        fd = os.open(path, _O_DIR | os.O_NOFOLLOW)
    except OSError:
        return  # missing (made later) or not a directory (refused by check_root)
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid() or not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return
        os.fchmod(fd, stat.S_IMODE(st.st_mode) & ~(stat.S_IWGRP | stat.S_IWOTH))
        if os.listdir(fd):  # entries from before it was closed to others: leave it as it was, to be refused
            os.fchmod(fd, stat.S_IMODE(st.st_mode))
    finally:
        os.close(fd)


def _problem(st: os.stat_result, owner: int, ancestor: bool) -> str | None:
    if st.st_uid not in (owner, 0):
        return "is owned by another user"
    if ancestor and st.st_uid == 0 and st.st_mode & stat.S_ISVTX:
        return None  # a root-owned sticky directory (/tmp): nobody may rename or remove another's entries
    if stat.S_ISDIR(st.st_mode) and st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "is writable by group or others"
    return None


def _unsafe(path: Path | str, st: os.stat_result, problem: str) -> UnsafePath:
    return UnsafePath(f"node root: {path} {problem} (owner uid {st.st_uid}, mode {stat.filemode(st.st_mode)} "
                      f"{st.st_mode & 0o7777:04o}); another user could make Mokka write or delete outside it. Use a "
                      f"root whose every directory is owned by you or root and writable by no one else "
                      f"(`chown`/`chmod go-w`), e.g. one made with `mktemp -d`")


# ---- walking beneath a directory handle ----

_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_RESOLVE_NO_SYMLINKS, _RESOLVE_BENEATH = 0x04, 0x08
_SYS_OPENAT2 = 437  # the same on every architecture (asm-generic and x86_64)


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_openat2_works: bool | None = None  # None: not tried yet; False: the kernel has no openat2 (ENOSYS)


def open_dir(dirfd: int, rel: str) -> int:
    """A new handle on the directory ``rel`` below ``dirfd``, reached without following any link."""
    global _openat2_works
    if _openat2_works is not False:
        how = _OpenHow(_O_DIR, 0, _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS)
        fd = _libc.syscall(ctypes.c_long(_SYS_OPENAT2), ctypes.c_long(dirfd), ctypes.c_char_p(rel.encode()),
                           ctypes.byref(how), ctypes.c_long(ctypes.sizeof(how)))
        if fd >= 0:
            _openat2_works = True
            return int(fd)
        err = ctypes.get_errno()
        if err not in (errno.ENOSYS, errno.EPERM) or _openat2_works:  # EPERM: a seccomp filter without it
            raise OSError(err, os.strerror(err), rel)
        _openat2_works = False
    fd = os.dup(dirfd)
    try:
        for part in rel.split("/"):
            if part in ("", ".", ".."):
                raise OSError(errno.EXDEV, "not beneath the directory", rel)
            inner = os.open(part, _O_DIR | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


class Beneath:
    """The root held open, and the directories under it opened so far (each once, through no link).

    Use as a context manager; every path is relative to the root and normalised (staging checks plans)."""

    def __init__(self, root: Path | str) -> None:
        self.root = str(root)
        self._fds: dict[str, int] = {"": os.open(self.root, _O_DIR)}
        #: who may own a directory on the way: this process's user, root, and the root's owner
        self._owners = {os.geteuid(), 0, os.fstat(self._fds[""]).st_uid}

    def __enter__(self) -> Beneath:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def dir(self, rel: str, made: list[str] | None = None, mode: int = 0o755) -> int:
        """The handle of directory ``rel``; with ``made``, missing directories are created (``mode``) and
        appended to it, outermost first.  Raises :class:`UnsafePath` for a link or non-directory on the way."""
        fd = self._fds.get(rel)
        if fd is not None:
            return fd
        head, _, name = rel.rpartition("/")
        parent = self.dir(head, made)
        try:
            fd = open_dir(parent, name)
        except FileNotFoundError:
            if made is None:
                raise
            try:
                os.mkdir(name, mode, dir_fd=parent)
                made.append(rel)
            except FileExistsError:
                pass
            fd = self._open(parent, name, rel)
        except OSError as exc:
            raise self._refusal(rel, exc) from None
        st = os.fstat(fd)
        problem = _problem(st, st.st_uid if st.st_uid in self._owners else -1, ancestor=True)
        if problem:
            os.close(fd)
            raise _unsafe(f"{self.root}/{rel}", st, problem)
        self._fds[rel] = fd
        return fd

    def _open(self, parent: int, name: str, rel: str) -> int:
        try:
            return open_dir(parent, name)
        except OSError as exc:
            raise self._refusal(rel, exc) from None

    def _refusal(self, rel: str, exc: OSError) -> OSError | UnsafePath:
        if exc.errno in (errno.ELOOP, errno.EXDEV, errno.ENOTDIR):
            return UnsafePath(f"{self.root}/{rel} is a symbolic link or not a directory: Mokka never writes or "
                              "deletes through a link under its root; remove it (it is not Mokka's) and retry")
        return exc

    def parent(self, rel: str, made: list[str] | None = None) -> tuple[int, str]:
        """The handle of the directory ``rel`` is in (made where missing, as :meth:`dir`), and its name there."""
        head, _, name = rel.rpartition("/")
        return self.dir(head, made), name

    def exists(self, rel: str) -> bool:
        """Whether ``rel`` is there (a link too, dangling or not); False where the way to it is not a directory."""
        try:
            fd, name = self.parent(rel)
            os.lstat(name, dir_fd=fd)
        except (OSError, UnsafePath):
            return False
        return True

    def remove(self, rel: str) -> None:
        """Remove ``rel`` (a directory with all it holds); nothing where it, or the way to it, is gone."""
        try:
            fd, name = self.parent(rel)
        except FileNotFoundError:
            return
        try:
            os.unlink(name, dir_fd=fd)
        except FileNotFoundError:
            pass
        except (IsADirectoryError, PermissionError):  # unlink(2) of a directory reports EPERM on some systems
            if not stat.S_ISDIR(os.lstat(name, dir_fd=fd).st_mode):
                raise
            self.forget(rel)
            shutil.rmtree(name, dir_fd=fd, ignore_errors=True)  # with dir_fd: never through a link

    def rename(self, source: str, target: str) -> None:
        """rename(2) ``source`` over ``target``, both relative to the root."""
        source_fd, source_name = self.parent(source)
        target_fd, target_name = self.parent(target)
        self.forget(source)
        self.forget(target)
        os.rename(source_name, target_name, src_dir_fd=source_fd, dst_dir_fd=target_fd)

    def rmdir(self, rel: str) -> None:
        """Remove the empty directory ``rel`` (raises as ``os.rmdir``; nothing where the way to it is gone)."""
        try:
            fd, name = self.parent(rel)
        except FileNotFoundError:
            return
        self.forget(rel)
        os.rmdir(name, dir_fd=fd)

    def forget(self, rel: str) -> None:
        """Close the handles of ``rel`` and what is below it: a directory removed or replaced is not reused."""
        for known in [k for k in self._fds if k == rel or k.startswith(f"{rel}/")]:
            os.close(self._fds.pop(known))
