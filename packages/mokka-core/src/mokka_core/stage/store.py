"""A node's state directory (``<root>/var/lib/mokka``): every name in it, the node lock, the one atomic write.

The names are spelled in :mod:`.layout` and nowhere else: as paths relative to a root (its
constants, re-exported here, for plans and for records kept relative) and as paths under a
given root (the properties of :class:`NodeStore`).  Inside the ib and imex folders the names
belong to their surfaces.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from ..errors import MokkaError
from ..model.inputs import Fingerprint, fingerprint
from .layout import (  # the state directory's layout (a module of its own: see why there), re-exported
    CTL_SOCKET,
    DAEMON_FILE,
    FABRICMANAGER_READY,
    IB_DIR,
    IMEX_DIR,
    KERNEL_LOG,
    KERNEL_LOG_FORWARDED,
    LOCK_FILE,
    LOG_DIR,
    MANIFESTS_DIR,
    NODE_FILE,
    NODE_LOG,
    OVERLAY_FILE,
    OVERRIDE_FILE,
    PRELOAD_KILL_SWITCH,
    RUN_DIR,
    SNAPSHOT,
    STATE_DIR,
    SUPERVISORD_CONFIG,
    SUPERVISORD_PID,
    SUPERVISORD_SOCKET,
    SURFACE_CACHE,
)

__all__ = [
    "CTL_SOCKET", "DAEMON_FILE", "FABRICMANAGER_READY", "IB_DIR", "IMEX_DIR", "KERNEL_LOG", "KERNEL_LOG_FORWARDED",
    "LOCK_FILE", "LOCK_TIMEOUT_S", "LOG_DIR", "MANIFESTS_DIR", "NODE_FILE", "NODE_LOG", "OVERLAY_FILE", "OVERRIDE_FILE",
    "PRELOAD_KILL_SWITCH", "RUN_DIR", "SNAPSHOT", "STATE_DIR", "SUPERVISORD_CONFIG", "SUPERVISORD_PID",
    "SUPERVISORD_SOCKET", "SURFACE_CACHE", "NodeLocked", "NodeStore", "atomic_write", "lock_timeout_s",
    "scratch_dir", "write_temps",
]


class NodeStore:
    """The state directory of the node under ``root``.

    One per root for the last few roots, its paths made once: a process that changes a node again and
    again (``Node.ctl``, the node daemon) asks for the same ones at every change."""

    def __new__(cls, root: Path) -> NodeStore:
        found = _STORES.get(root)
        if found is None or type(found) is not cls:
            found = super().__new__(cls)
            found.root = root
            if len(_STORES) >= _STORES_KEPT:
                _STORES.pop(next(iter(_STORES)))
            _STORES[root] = found
        return found

    def __init__(self, root: Path) -> None:
        self.root = root

    @functools.cached_property
    def dir(self) -> Path:
        return self.root / STATE_DIR

    @functools.cached_property
    def node_file(self) -> Path:
        """Which NodeSpec the root was built from (``stage.nodefile``)."""
        return self.root / NODE_FILE

    def booted_ms(self) -> int:
        """When the node came up (wall-clock ms, recorded in the node file); 0 where none says."""
        import json

        try:
            value = json.loads(self.node_file.read_bytes()).get("booted_ms")
        except (OSError, ValueError, AttributeError):
            return 0
        return value if type(value) is int and value > 0 else 0

    @functools.cached_property
    def kernel_log_forwarded(self) -> Path:
        """The last kernel-log record written to the host's kernel log, so that none is written twice."""
        return self.root / KERNEL_LOG_FORWARDED

    @functools.cached_property
    def override_file(self) -> Path:
        """The runtime override file (``nvml-mock-ctl``, the allocation watcher), unless the node names another."""
        return self.root / OVERRIDE_FILE

    @functools.cached_property
    def overlay_file(self) -> Path:
        """The topology overlay, unless the node names another."""
        return self.root / OVERLAY_FILE

    @functools.cached_property
    def lock_file(self) -> Path:
        return self.root / LOCK_FILE

    @functools.cached_property
    def daemon_file(self) -> Path:
        """The node daemon's run state (``node.runstate``)."""
        return self.root / DAEMON_FILE

    @functools.cached_property
    def supervisord_config(self) -> Path:
        return self.root / SUPERVISORD_CONFIG

    @functools.cached_property
    def supervisord_pid(self) -> Path:
        return self.root / SUPERVISORD_PID

    @functools.cached_property
    def supervisord_socket(self) -> Path:
        return self.root / SUPERVISORD_SOCKET

    @functools.cached_property
    def log_dir(self) -> Path:
        """The services' logs and the node's log (``node.logstream``); teardown removes it whole."""
        return self.root / LOG_DIR

    @functools.cached_property
    def node_log(self) -> Path:
        return self.root / NODE_LOG

    def service_log(self, program: str) -> Path:
        """Where supervisord writes ``program``'s output (supervisord's own log is ``supervisord``)."""
        return self.log_dir / f"{program}.log"

    @functools.cached_property
    def manifests_dir(self) -> Path:
        return self.root / MANIFESTS_DIR

    def manifest(self, surface: str) -> Path:
        """What ``surface`` staged under the root (``stage.staging``)."""
        return self.manifests_dir / f"{surface}.json"

    @functools.cached_property
    def surface_cache(self) -> Path:
        """The installed surface classes, so a ctl change need not scan entry points (``stage.render``)."""
        return self.root / SURFACE_CACHE

    @functools.cached_property
    def snapshot(self) -> Path:
        """What was rendered from what: the node, its inputs' fingerprints, each plan's digest (``stage.snapshot``)."""
        return self.root / SNAPSHOT

    @functools.cached_property
    def preload_kill_switch(self) -> Path:
        return self.root / PRELOAD_KILL_SWITCH

    @functools.cached_property
    def run_dir(self) -> Path:
        return self.root / RUN_DIR

    @functools.cached_property
    def fabricmanager_ready(self) -> Path:
        return self.root / FABRICMANAGER_READY

    @functools.cached_property
    def ib_dir(self) -> Path:
        return self.root / IB_DIR

    @functools.cached_property
    def imex_dir(self) -> Path:
        return self.root / IMEX_DIR

    @functools.cached_property
    def ctl_socket(self) -> Path:
        """Where the node daemon takes nvml-mock-ctl commands (``node.relay``)."""
        return self.root / CTL_SOCKET

    @property
    def bookkeeping(self) -> tuple[Path, ...]:
        """Every file Mokka itself keeps here, for teardown.

        Manifests and the surfaces' folders are not listed: staging's teardown removes them
        with what they record.
        """
        return (self.surface_cache, self.snapshot, self.node_file, self.supervisord_config,
                self.supervisord_pid, self.override_file, self.lock_file, self.ctl_socket, self.daemon_file,
                self.kernel_log_forwarded)

    @contextlib.contextmanager
    def lock(self, timeout_s: float | None = None) -> Iterator[None]:
        """The node lock: one ``flock`` on the lock file serialises every writer of the root's rendered state.

        The ctl holds it across read-modify-write of the override file and the re-render
        that follows; the daemon holds it while it re-renders.  ``flock`` locks belong to
        an open file description, so two threads of one process exclude each other too.
        A writer waits at most ``timeout_s`` (default :func:`lock_timeout_s`), then raises
        :class:`NodeLocked` naming the holder.
        """
        if not self.lock_file.parent.is_dir():
            self.lock_file.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        with owner_lock(self.lock_file, timeout_s):
            yield


#: how long a writer waits for the node lock before it gives up (MOKKA_LOCK_TIMEOUT_S overrides)
LOCK_TIMEOUT_S = 10


class NodeLocked(MokkaError):
    """The node lock stayed held past the timeout (exit status 1)."""


def lock_timeout_s() -> float:
    text = os.environ.get("MOKKA_LOCK_TIMEOUT_S")
    if text is None:
        return LOCK_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < 86400:
        raise NodeLocked(f"MOKKA_LOCK_TIMEOUT_S must be seconds from 0 to 86400, got {text!r}")
    return value


@contextlib.contextmanager
def owner_lock(path: Path, timeout_s: float | None = None) -> Iterator[None]:
    """An exclusive ``flock`` on the lock file ``path``, which only its owner can open (mode 0600, made so).

    In a directory every user may write the mode is 0666 instead: there every user may already replace
    what the lock guards (the library's rule too, native/src/settings.c). A writer waits at most
    ``timeout_s`` (default :func:`lock_timeout_s`), then raises :class:`NodeLocked` naming the holder.
    """
    mode = 0o666 if path.parent.stat().st_mode & stat.S_IWOTH else 0o600
    flags = os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    try:  # an existing lock without O_CREAT: fs.protected_regular refuses it on another user's file
        fd = os.open(path, flags)
    except FileNotFoundError:
        fd = os.open(path, flags | os.O_CREAT, mode)
    except OSError as e:
        raise NodeLocked(f"cannot open the lock {path}: {e.strerror}") from None
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise NodeLocked(f"the lock {path} is not a regular file")
        if status.st_uid == os.geteuid():
            os.fchmod(fd, mode)
        _wait_for_lock(fd, path, lock_timeout_s() if timeout_s is None else timeout_s)
        yield
    finally:
        os.close(fd)  # closing the last descriptor releases the lock


def _wait_for_lock(fd: int, path: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    pause = 0.001
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                break
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
    holder = _lock_holder(os.fstat(fd).st_ino)
    who = f"pid {holder}" if holder else "another process"
    stop = f"`kill {holder}`" if holder else "stop it"
    raise NodeLocked(f"the lock {path} is held by {who} for more than {timeout_s:g} s. If that process is "
                     f"stuck, {stop} and retry; to wait longer set MOKKA_LOCK_TIMEOUT_S (seconds)")


def _lock_holder(inode: int) -> int | None:
    """The pid /proc/locks gives for the flock on ``inode``, where it can be read."""
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()  # "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF"
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5].rsplit(":", 1)[-1] == str(inode):
            return int(fields[4]) if fields[4].isdigit() else None
    return None


def _exclusive(prefix: Path, suffix: str, flags: int) -> tuple[int, str]:
    """A new file named ``prefix<random>suffix``, created exclusively (mode 0600), opened with ``flags``.

    What ``tempfile.mkstemp`` does, without the module (it and ``random`` cost nvml-mock-ctl milliseconds).
    """
    for _ in range(100):
        name = f"{prefix}{os.urandom(6).hex()}{suffix}"
        try:
            return os.open(name, flags | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600), name
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name like {prefix}*{suffix}")


def scratch_dir(parent: Path, prefix: str) -> Path:
    """A new private directory ``parent/prefix<random>`` (mode 0700), as ``tempfile.mkdtemp`` makes."""
    for _ in range(100):
        path = parent / f"{prefix}{os.urandom(6).hex()}"
        try:
            path.mkdir(mode=0o700)
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"no free directory name like {parent / prefix}*")


_STORES: dict[Path, NodeStore] = {}
_STORES_KEPT = 32


def write_temps(directory: Path) -> list[Path]:
    """The temp files ``atomic_write`` left in ``directory`` (``.name.<12 hex>.tmp``), killed before the rename."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return [directory / name for name in names if _is_write_temp(name)]


def _is_write_temp(name: str) -> bool:
    """``.name.<12 hex>.tmp``: atomic_write's temp name (``_exclusive`` draws os.urandom(6).hex())."""
    stem = name.removesuffix(".tmp")
    return (name.startswith(".") and stem != name and len(stem) > 14 and stem[-13] == "."
            and all(c in "0123456789abcdef" for c in stem[-12:]))


def atomic_write(path: Path, data: str | bytes, *, mode: int = 0o644, durable: bool = False) -> Fingerprint:
    """Replace ``path`` with ``data`` (text as UTF-8): a reader sees the old file or the new one, never a part.

    The data goes to a temp file in the same directory, gets exactly ``mode`` (whatever the
    umask: consumers may read as another user) and is renamed over ``path``; on any failure
    the temp file is removed and ``path`` is left as it was.  ``durable`` also fsyncs the file
    before the rename and the directory after it, so the new content survives a crash.
    Returns the new file's fingerprint, taken before the rename makes it visible (a rename
    keeps inode, size and mtime), so a caller can record it before any reader sees the file.
    The directory must exist.
    """
    fd, tmp = _exclusive(path.parent / f".{path.name}.", ".tmp", os.O_WRONLY)
    try:
        with os.fdopen(fd, "wb", buffering=0) as out:  # unbuffered: no buffer to size, no tty to ask about
            view = memoryview(data.encode() if isinstance(data, str) else data)
            while view:
                view = view[out.write(view):]
            os.fchmod(out.fileno(), mode)
            if durable:
                os.fsync(out.fileno())
        written = fingerprint(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if durable:
        directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
    return written
