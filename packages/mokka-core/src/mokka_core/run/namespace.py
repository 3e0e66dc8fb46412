"""Show a staged root at the real paths inside a private mount namespace.

Split in two: :func:`plan_mounts` is pure (it reads the host, the staged root and
the host's mount table and returns a list of operations) and :func:`enter` runs
such a list in a freshly forked child, between ``unshare`` and ``exec``.

What each staged tree becomes (see CONSUMERS.md, "Mount namespaces"):

- ``sys``: merged into ``/sys`` (see :func:`merge_ops`): a tmpfs over ``/sys``
  holding the real entries bound back and the staged ones bound in, recursively
  where both have a directory (``bus/pci/devices``, ``devices``, ``module``,
  ``class``).  Staged devices appear beside the real ones with the real tree's
  shape, so relative links like ``../../../devices/pci0000:1b/...`` resolve.  Not
  an overlay: a change under the root (``nvml-mock-ctl fail-surface pci``)
  shows at once through the bound directories, while overlayfs leaves changed
  lower layers undefined (stale files, vanished directories); and in a user
  namespace the host's ``/sys`` cannot be an overlay layer at all (its cgroup
  mounts are locked).
- ``dev``: the root's ``dev`` directory bound over ``/dev`` (so it is private and
  live), with the real basics bound into it (null, zero, full, random, urandom,
  tty, fuse, shm, mqueue) and the fd/stdin/stdout/stderr links.  ``/dev/ptmx`` is a link to
  ``pts/ptmx``, as container runtimes make it: a bound ptmx device node cannot find its
  devpts instance (the kernel looks for ``pts`` beside the node's own mount), so
  ``openpty`` failed.  As root ``/dev/pts`` is the host's instance, bound: CMD keeps its
  terminal under its real name (``tty``, ``ttyname``), and a new pty lives as long as
  whoever holds it open.  Without root the host's ``pts/ptmx`` (mode 000) cannot be
  opened, so ``/dev/pts`` is a devpts instance of the namespace's own
  (``newinstance,ptmxmode=0666,mode=0620``, as runc mounts it).
- ``proc/<dir>`` (``proc/driver``): the same merge: a tmpfs over the real
  directory, the real entries bound back, the staged ones bound in (live).
- ``proc/<file>`` (``proc/modules``, ``proc/devices``): bound over the real file (``/proc/modules``
  as the node's modules plus the host's others; ``/proc/devices`` is staged with the host's lines).  procfs cannot
  gain new names (and refuses to be an overlay layer), so a file the running
  kernel lacks is reported in :attr:`MountPlan.missing_proc_files`; the caller
  runs CMD through ``mokka-proc-files``, which answers CMD's opens of it.
- the directories a driver install adds files to, :data:`LINKED_DIRS` (the library
  directory, ``/usr/bin``): an overlay whose upper layer holds one entry per staged
  one: a staged link is copied, a program or library is bound over an empty file
  (a regular file at the real path, as a driver install has it), anything else
  becomes an absolute link into the root.  So ``/usr/lib/<multiarch>/libnvidia-ml.so.1``
  and ``/usr/bin/nvidia-smi`` exist at the real paths (the DRA plugin looks them up
  by path), the host's thousands of entries cost one mount, and what the links
  point at stays live (the library finds the state file beside the path it was
  loaded from, and that file is replaced while CMD runs).  The loader cache is
  then rebuilt inside the namespace (:func:`mokka_core.run.command.loader_cache`).
- anything else staged (``var/run/cdi``, ``lib/modules``, ``etc``, ...): merged
  into the deepest directory that exists on the host, as a tmpfs of binds (host
  entries bound back, staged ones bound in) -- not an overlay, because sockets do
  not work through overlayfs and ``/run`` is full of them.

What changes under the root while CMD runs (``nvml-mock-ctl``) shows wherever a
staged *directory* is bound: the NVML state file, ``/dev``, ``/sys/devices/pci*``,
``/sys/module/nvidia*``, ``/proc/driver/nvidia``.  Entries placed one by one are
fixed when CMD starts: ``/proc/modules``, ``/proc/devices``, the links in ``/sys/bus/pci/devices``.

Without root everything runs in a user namespace that maps only the caller's ids;
staged device nodes are then empty regular files (creating a node needs real root).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import stat
from collections.abc import Collection
from pathlib import Path, PurePosixPath
from typing import NamedTuple, Union

from ..stage.paths import LIB_DIR
from ..stage.store import STATE_DIR

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWUSER = 0x10000000
MS_NOSUID = 0x2
MS_NOEXEC = 0x8
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000

#: Device nodes every program expects in /dev; bound back from the host.
#: (fuse: a node's /dev has it, and the node's own /dev/kmsg is served through it)
DEV_BASICS = ("null", "zero", "full", "random", "urandom", "tty", "fuse")
DEV_BASIC_DIRS = ("shm", "mqueue")
#: A private pseudo-terminal instance (without root), as runc and podman mount it.
DEVPTS_OPTIONS = "newinstance,ptmxmode=0666,mode=0620"
#: Host directories shown with the staged entries added through links (see the module docstring).
LINKED_DIRS = (LIB_DIR, "usr/bin")
DEV_LINKS = {"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1",
             "stderr": "/proc/self/fd/2"}

#: Staged trees handled by their own rule (not by the generic merge).
SPECIAL_TREES = ("sys", "dev", "proc", STATE_DIR, *LINKED_DIRS)


class NamespaceError(Exception):
    """Setting up the private namespace failed; the message says what and why."""


class Captured(NamedTuple):
    """A host path opened (O_PATH) before any mount, so it can be bound back after it is covered."""

    path: str


Source = Union[str, Captured]


class Tmpfs(NamedTuple):
    target: str
    mode: int = 0o755


class Overlay(NamedTuple):
    target: str
    lowers: tuple[str, ...]  # uppermost first


class Devpts(NamedTuple):
    target: str
    options: str = DEVPTS_OPTIONS


class Bind(NamedTuple):
    source: Source
    target: str
    create: str | None = None  # "file" or "dir": make the mount point first (inside a fresh tmpfs)
    recursive: bool = False


class MakeDir(NamedTuple):
    path: str
    mode: int = 0o755


class MakeFile(NamedTuple):
    path: str
    content: str


class MakeSymlink(NamedTuple):
    path: str
    target: str


Op = Union[Tmpfs, Overlay, Devpts, Bind, MakeDir, MakeFile, MakeSymlink]


class MountPlan:
    def __init__(self) -> None:
        self.ops: list[Op] = []
        #: /proc files staged under the root that this kernel does not have (no mount can show them): each
        #: real path with its staged file, for ``mokka-proc-files``.
        self.missing_proc_files: dict[str, str] = {}
        #: Staged trees that could not be placed, with the reason (reported, not fatal).
        self.skipped: list[str] = []


def host_mount_points(mountinfo: str | None = None) -> list[str]:
    """Mount points of this mount namespace, in mount order (from /proc/self/mountinfo)."""
    if mountinfo is None:
        mountinfo = Path("/proc/self/mountinfo").read_text()
    points = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) > 4:
            points.append(_unescape(fields[4]))
    return points


def _unescape(path: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo
    out, i = [], 0
    while i < len(path):
        if path[i] == "\\" and path[i + 1 : i + 4].isdigit() and len(path[i + 1 : i + 4]) == 3:
            out.append(chr(int(path[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(path[i])
            i += 1
    return "".join(out)


def submounts(target: str, mount_points: list[str]) -> list[str]:
    """Mount points strictly below ``target`` that are not below another of them (bind these back with MS_REC)."""
    prefix = target.rstrip("/") + "/"
    below = sorted({m for m in mount_points if m.startswith(prefix)}, key=len)
    top: list[str] = []
    for m in below:
        if not any(m.startswith(t.rstrip("/") + "/") for t in top):
            top.append(m)
    return top


def plan_mounts(root: Path, *, host: Path = Path("/"), mountinfo: str | None = None,
                scratch: Path | None = None, private_pts: bool = False) -> MountPlan:
    """Everything needed to show ``root`` at the real paths of ``host`` (always ``/`` outside tests).

    ``scratch``: a private directory for files made here (the merged module list, the link views).
    ``private_pts``: a devpts instance of the namespace's own (without root; see the module docstring).
    """
    points = host_mount_points(mountinfo)
    plan = MountPlan()

    def h(rel: str) -> str:  # host path of a root-relative path
        return str(host / rel)

    if (root / "sys").is_dir():
        plan.ops += merge_ops(h("sys"), [root / "sys"])
    if (root / "dev").is_dir():
        plan.ops += dev_ops(root / "dev", h("dev"), private_pts)
    if (root / "proc").is_dir():
        proc_ops(root / "proc", host / "proc", plan, scratch)
    excluded = {str(root / STATE_DIR)}
    layered: list[tuple[str, list[Op]]] = []
    groups: dict[str, list[Path]] = {}
    for rel in generic_merge_points(root, host, set(SPECIAL_TREES)):
        groups.setdefault(os.path.realpath(h(rel)), []).append(root / rel)
    for target, staged_dirs in groups.items():
        layered.append((target, merge_ops(target, staged_dirs, exclude=excluded)))
    for rel in LINKED_DIRS:
        if (root / rel).is_dir() and any((root / rel).iterdir()) and os.path.isdir(h(rel)) and scratch is not None:
            target = os.path.realpath(h(rel))
            layered.append((target, linked_dir_ops(target, root / rel, scratch / "links" / rel, points)))
    for _, ops in sorted(layered, key=lambda item: item[0].count("/")):  # outer directories first
        plan.ops += ops
    return plan


def linked_dir_ops(target: str, staged: Path, view: Path, mount_points: list[str]) -> list[Op]:
    """Show host directory ``target`` with ``staged``'s entries added (an overlay over ``view``).

    A staged link is copied; a program or library (an executable file) is bound over an empty file, so at
    the real path it is the regular file a driver install has (tools that resolve links, like the container
    toolkit's library search, name ``/usr/lib/<multiarch>/libnvidia-ml.so.<version>``, never the root);
    anything else becomes an absolute link into the root, live (the NVML state file is replaced while CMD runs).
    """
    ops: list[Op] = [MakeDir(str(view))]
    programs: list[Op] = []
    with os.scandir(staged) as entries:
        for entry in sorted(entries, key=lambda item: item.name):
            shown = str(view / entry.name)
            if entry.is_symlink():
                ops.append(MakeSymlink(shown, os.readlink(entry.path)))
            elif entry.is_file() and entry.stat().st_mode & 0o111:
                ops.append(MakeFile(shown, ""))
                programs.append(Bind(str(staged.absolute() / entry.name), f"{target}/{entry.name}"))
            else:
                ops.append(MakeSymlink(shown, str(staged.absolute() / entry.name)))
    keep = submounts(target, mount_points)
    ops.append(Overlay(target, (str(view), target)))
    ops += [Bind(Captured(m), m, recursive=True) for m in keep]
    return ops + programs


def merge_ops(target: str, staged_dirs: list[Path], *, exclude: Collection[str] = (), recurse: bool = True,
              fresh: bool = True) -> list[Op]:
    """Show host directory ``target`` merged with ``staged_dirs``: a tmpfs holding binds of both sides.

    Used where an overlay will not do: procfs cannot be a layer, and sockets do not work
    through overlayfs (so /run stays usable).  Staged entries win; where both sides
    have a directory of the same name (and ``recurse``), that directory is merged the
    same way; an empty staged directory leaves the host's as it is.  Host entries are bound from handles taken
    before anything is mounted;
    staged ones from the root, so later changes under the root show.
    """
    mode = stat.S_IMODE(os.stat(target).st_mode)
    ops: list[Op] = [Tmpfs(target, mode) if fresh else MakeDir(target, mode)]
    host = _kinds(target)
    staged: dict[str, list[tuple[Path, str]]] = {}
    for directory in staged_dirs:
        for name, kind in sorted(_kinds(str(directory)).items()):
            if str(directory / name) not in exclude:
                staged.setdefault(name, []).append((directory / name, kind))
    for name in sorted(host.keys() | staged.keys()):
        dest = f"{target}/{name}"
        sources = staged.get(name, [])
        if name in host and sources and all(kind == DIR and not os.listdir(source) for source, kind in sources):
            sources = []  # an empty staged directory (a mount point, sys/fs/cgroup) adds nothing to the host's
        if not sources:
            ops.append(_entry(dest, dest, host[name], captured=True))
            continue
        if recurse and host.get(name) == DIR and all(kind == DIR for _, kind in sources):
            ops += merge_ops(dest, [source for source, _ in sources], exclude=exclude, fresh=False)
        else:
            source, kind = sources[0]
            ops.append(_entry(str(source), dest, kind, captured=False))
    return ops


DIR, LINK, OTHER = "dir", "link", "other"


def _kinds(directory: str) -> dict[str, str]:
    """Each name in ``directory`` and what it is (a directory, a link, anything else), from one listing: the
    file types come with the names (sysfs, procfs, devtmpfs and tmpfs give them)."""
    with os.scandir(directory) as entries:
        return {entry.name: LINK if entry.is_symlink() else DIR if entry.is_dir(follow_symlinks=False) else OTHER
                for entry in entries}


def _entry(source: str, dest: str, kind: str, captured: bool) -> Op:
    """What shows ``source`` (a host entry, ``captured`` before anything is mounted, or a staged one) at ``dest``."""
    if kind == LINK:
        return MakeSymlink(dest, os.readlink(source))
    origin: Source = Captured(source) if captured else source
    if kind == DIR:
        return Bind(origin, dest, create="dir", recursive=True)
    return Bind(origin, dest, create="file")


def dev_ops(staged: Path, target: str, private_pts: bool = False) -> list[Op]:
    """The root's dev directory becomes /dev, with the real basics bound into it.

    Bound whole, so device nodes a surface adds or removes later show at once.  The
    basics' mount points are created in the root's dev directory (under ``mokka run``
    the root lives on a tmpfs only the namespace sees).
    """
    ops: list[Op] = [Bind(str(staged), target, recursive=True)]
    if private_pts:
        ops.append(Devpts(f"{target}/pts"))
    elif os.path.isdir(f"{target}/pts"):
        ops.append(Bind(Captured(f"{target}/pts"), f"{target}/pts", create="dir", recursive=True))
    if not os.path.lexists(staged / "ptmx"):
        ops.append(MakeSymlink(f"{target}/ptmx", "pts/ptmx"))
    for name in DEV_BASICS:
        if os.path.exists(f"{target}/{name}"):
            ops.append(Bind(Captured(f"{target}/{name}"), f"{target}/{name}", create="file"))
    for name in DEV_BASIC_DIRS:
        if os.path.isdir(f"{target}/{name}"):
            ops.append(Bind(Captured(f"{target}/{name}"), f"{target}/{name}", create="dir", recursive=True))
    for name, link in DEV_LINKS.items():
        if not os.path.lexists(staged / name):
            ops.append(MakeSymlink(f"{target}/{name}", link))
    return ops


def proc_ops(staged: Path, proc: Path, plan: MountPlan, scratch: Path | None) -> None:
    for child in sorted(staged.iterdir()):
        real = proc / child.name
        if child.is_dir() and not child.is_symlink():
            if real.is_dir():
                plan.ops += merge_ops(str(real), [child], recurse=False)
            else:
                plan.skipped.append(f"/proc/{child.name}: this kernel has no such directory")
        elif real.is_file() and child.name == "modules" and scratch is not None:
            # the node's modules plus the host's others, as lsmod on a real node shows them all
            merged = scratch / "proc-modules"
            plan.ops.append(MakeFile(str(merged), merged_module_list(child.read_text(), real.read_text())))
            plan.ops.append(Bind(str(merged), str(real)))
        elif real.is_file():
            plan.ops.append(Bind(str(child), str(real)))
        else:
            plan.missing_proc_files[f"/proc/{child.name}"] = str(child)


def merged_module_list(staged: str, host: str) -> str:
    """/proc/modules lines: the staged modules first (most recently loaded), then the host's others."""
    names = {line.split(maxsplit=1)[0] for line in staged.splitlines() if line.strip()}
    others = [line for line in host.splitlines() if line.strip() and line.split(maxsplit=1)[0] not in names]
    return staged.rstrip("\n") + "\n" + "".join(f"{line}\n" for line in others)


def generic_merge_points(root: Path, host: Path, skip: set[str]) -> list[str]:
    """Root-relative directories to merge so every other staged entry shows at its real path.

    For each staged entry: the deepest ancestor that exists on the host as a directory.
    """
    points: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = PurePosixPath(Path(dirpath).relative_to(root).as_posix())
        if any(str(rel_dir) == s or str(rel_dir).startswith(s + "/") for s in skip):
            dirnames[:] = []
            continue
        leaves = filenames + [n for n in dirnames if (Path(dirpath) / n).is_symlink()]
        if not dirnames and not filenames:
            leaves = ["."]  # an empty staged directory is an entry too
        if not leaves or str(rel_dir) == ".":
            continue
        # deepest ancestor of this directory that exists on the host as a directory
        point = rel_dir
        while str(point) != "." and not (host / str(point)).is_dir():
            point = point.parent
        if str(point) != ".":
            points.add(str(point))
    ordered = sorted(points, key=lambda p: (p.count("/"), p))
    top: list[str] = []
    for p in ordered:
        if not any(p.startswith(t + "/") for t in top):
            top.append(p)
    return top


# ---- running a plan (in the forked child, before exec) -----------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.unshare.argtypes = [ctypes.c_int]
_libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.sethostname.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
MNT_DETACH = 0x2


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise NamespaceError(f"{what}: {os.strerror(err)}")


def _enc(text: str | None) -> bytes | None:
    return text.encode() if text is not None else None


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = _enc
    _check(_libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)),
           f"mount {fstype or 'bind'} {source or ''} on {target}")


def umount(target: str) -> None:
    """Detach the mount on ``target`` (lazily: what is open under it stays usable until closed)."""
    _check(_libc.umount2(target.encode(), MNT_DETACH), f"umount {target}")


PR_SET_PDEATHSIG = 1


def die_with(parent: int, sig: int) -> bool:
    """Have the calling child get ``sig`` when ``parent`` dies (PR_SET_PDEATHSIG); False if that failed or
    ``parent`` is gone already.  Loaded with this module, so a forked child calls no loader."""
    return _libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0) == 0 and os.getppid() == parent


def unshare_mount_namespace(rootless: bool, hostname: str | None = None) -> None:
    """Enter a private mount namespace (and, without root, a user namespace that maps only our own ids); with
    ``hostname``, a private UTS namespace too, named so (``hostname`` and uname(2) there say the node's name)."""
    uid, gid = os.getuid(), os.getgid()
    flags = CLONE_NEWNS | (CLONE_NEWUSER if rootless else 0) | (CLONE_NEWUTS if hostname is not None else 0)
    if _libc.unshare(flags) != 0:
        err = ctypes.get_errno()
        if rootless:
            raise NamespaceError(userns_refusal_reason(os.strerror(err)))
        raise NamespaceError(f"cannot create a mount namespace: {os.strerror(err)}")
    if rootless:
        Path("/proc/self/setgroups").write_text("deny")
        Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
        Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
    if hostname is not None:
        name = hostname.encode()
        _check(_libc.sethostname(name, len(name)), f"sethostname {hostname}")
    mount(None, "/", None, MS_REC | MS_PRIVATE)


def refusal() -> str | None:
    """Why this process cannot make a private mount namespace (None: it can), found by trying in a child."""
    rootless = os.geteuid() != 0
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            unshare_mount_namespace(rootless)
        except BaseException as exc:  # the child only reports, whatever went wrong
            os.write(write, str(exc).encode())
            os._exit(1)
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        reason = pipe.read().decode(errors="replace")
    os.waitpid(pid, 0)
    return reason or None


def userns_refusal_reason(strerror: str) -> str:
    """Why this kernel refuses an unprivileged user namespace, in words a user can act on."""
    checks = (
        ("/proc/sys/kernel/unprivileged_userns_clone", "0",
         "user namespaces are disabled (kernel.unprivileged_userns_clone=0)"),
        ("/proc/sys/user/max_user_namespaces", "0", "user namespaces are disabled (user.max_user_namespaces=0)"),
        ("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "1",
         "AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1)"),
    )
    for path, bad, reason in checks:
        try:
            if Path(path).read_text().strip() == bad:
                return f"{reason}; run as root"
        except OSError:
            continue
    return f"cannot create a user namespace ({strerror}); run as root"


def enter(plan: MountPlan) -> None:
    """Run ``plan`` in the current (already unshared) mount namespace."""
    fds: dict[str, int] = {}
    for op in plan.ops:
        if isinstance(op, Bind) and isinstance(op.source, Captured) and op.source.path not in fds:
            fds[op.source.path] = os.open(op.source.path, os.O_PATH | os.O_CLOEXEC)
    try:
        for op in plan.ops:
            _run_op(op, fds)
    finally:
        for fd in fds.values():
            os.close(fd)


def _run_op(op: Op, fds: dict[str, int]) -> None:
    if isinstance(op, Tmpfs):
        mount("mokka", op.target, "tmpfs", MS_NOSUID, f"mode={op.mode:o}")
    elif isinstance(op, Devpts):
        os.makedirs(op.target, exist_ok=True)
        mount("devpts", op.target, "devpts", MS_NOSUID | MS_NOEXEC, op.options)
    elif isinstance(op, Overlay):
        lowers = ":".join(op.lowers)
        mount("mokka", op.target, "overlay", 0, f"lowerdir={lowers}")
    elif isinstance(op, Bind):
        source = f"/proc/self/fd/{fds[op.source.path]}" if isinstance(op.source, Captured) else op.source
        if op.create == "dir":
            _mkdir(op.target)
        elif op.create == "file":
            with contextlib.suppress(FileExistsError):  # O_EXCL: never through a link that is there
                os.close(os.open(op.target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644))
        mount(source, op.target, None, MS_BIND | (MS_REC if op.recursive else 0))
    elif isinstance(op, MakeDir):
        _mkdir(op.path)
        os.chmod(op.path, op.mode)
    elif isinstance(op, MakeSymlink):
        os.symlink(op.target, op.path)
    elif isinstance(op, MakeFile):
        Path(op.path).write_text(op.content)



def _mkdir(path: str) -> None:
    """``os.makedirs(path, exist_ok=True)`` in one system call where the parent is there (as a plan makes it)."""
    try:
        os.mkdir(path)
    except FileExistsError:
        if not os.path.isdir(path):
            raise
    except FileNotFoundError:
        os.makedirs(path, exist_ok=True)


class Joinable:
    """Another process's mount (and user) namespace, opened now so a forked child can join it (``join``)."""

    def __init__(self, pid: int, rootless: bool) -> None:
        kinds = [("user", CLONE_NEWUSER)] if rootless else []
        self.pid = pid
        self._fds = [(os.open(f"/proc/{pid}/ns/{name}", os.O_RDONLY | os.O_CLOEXEC), flag)
                     for name, flag in [*kinds, ("mnt", CLONE_NEWNS)]]

    def join(self) -> None:
        """Enter the namespaces (in a child between fork and exec: setns needs a single thread)."""
        for fd, flag in self._fds:
            _check(_libc.setns(fd, flag), f"setns into the namespace of pid {self.pid}")

    def close(self) -> None:
        for fd, _ in self._fds:
            os.close(fd)
        self._fds = []
