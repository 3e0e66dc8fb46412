"""``mokka run`` and ``mokka shim``: stage a node into a private root and run one command against it.

``run`` shows the root at the real paths in a private mount namespace (see
:mod:`mokka_core.run.namespace`); ``shim`` needs no namespace and redirects paths with
the LD_PRELOAD shim instead (C programs only).  Both start every enabled surface's
services (:mod:`mokka_core.run.services`) and wait until they are ready, run the
command with what the surfaces say a consumer needs (preloads, environment), then
stop the services and remove the root when the command exits, also on Ctrl-C and
SIGTERM, and return the command's exit status.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from ..errors import MokkaError
from ..model.apply import apply
from ..model.inputs import Fingerprint, fingerprint
from ..model.node import Node
from ..model.spec import NodeSpec
from ..stage import mig_boot, nodefile, snapshot
from ..stage.native import native_dir, native_program
from ..stage.paths import LIB_DIR, say_once, user_cache
from ..stage.render import consumer_needs, context, enabled, entry_digests, plan_digest, services, with_contributions
from ..stage.staging import stage_wave, staged_surfaces, teardown
from ..stage.store import atomic_write
from ..stage.surface import ConsumerNeeds, Entry, Service, Surface
from . import installed, leftovers, namespace, resolved, stage_cache
from .services import ServiceFailed, Services

log = logging.getLogger(__name__)

PRELOAD_LIB = "libmokka-preload.so"
WRAPPER = "mokka-preload-wrapper"
#: what CMD is exec'd through when this kernel lacks a staged /proc file (native/procfiles/main.c)
PROC_FILES_LAUNCHER = "mokka-proc-files"
#: Exit status when mokka could not set up the node (like every MokkaError) or start CMD (as env(1) does).
EXIT_SETUP_FAILED = 1
EXIT_CANNOT_EXEC = 126
EXIT_NOT_FOUND = 127
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
WATCHED = frozenset({*FORWARDED_SIGNALS, signal.SIGCHLD})
STOPPING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: where the services' output goes (in the private work directory): CMD's stdout stays its own
SERVICE_LOG = "services.log"


@contextlib.contextmanager
def held_signals() -> Iterator[None]:
    """Hold Ctrl-C, SIGTERM & co. from staging to the end of clean-up, so nothing interrupts removal.

    While CMD runs they are relayed (see :func:`supervise`); ones that arrive during
    clean-up are dropped: CMD has already ended and its status is what we return.
    """
    old = signal.pthread_sigmask(signal.SIG_BLOCK, WATCHED)
    try:
        yield
    finally:
        while signal.sigtimedwait(WATCHED, 0) is not None:
            pass
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


class StagedNode(NamedTuple):
    workdir: Path  # private temp dir: holds root/ and the loader cache; removed afterwards
    root: Path
    surfaces: tuple[str, ...]
    stage_seconds: float


class NodePlan(NamedTuple):
    """Every enabled installed surface's plan for one root (pure data, made before anything is staged)."""

    spec: NodeSpec
    root: Path
    plans: dict[str, list[Entry]]
    fingerprints: dict[str, Fingerprint]  # of every input, for the snapshot
    base: Node  # without the override
    base_json: Any  # ``base`` encoded, as the snapshot records it
    override_doc: dict[str, Any]
    node: Node
    installed: Mapping[str, type[Surface]]
    services: dict[str, Service]  # every enabled surface's, by program name
    needs: ConsumerNeeds  # what CMD needs from the enabled surfaces
    booted_ms: int  # when the node came up (wall clock), the origin of its fault clocks
    mig_record: str | None = None  # the setter record of a node that boots partitioned (``stage.mig_boot``)


def plan_node(spec: NodeSpec, root: Path, surfaces: Mapping[str, type[Surface]] | None = None) -> NodePlan:
    """The plan for a fresh ``root``: the node is the spec's own (from the resolve cache where it can be), since
    the override and overlay nvml-mock-ctl will read there do not exist yet."""
    rooted = nodefile.rooted(spec, root)
    later = [path for path in (rooted.override_file, rooted.overlay_file)
             if path is not None and path not in (spec.override_file, spec.overlay_file)]
    if any(path.exists() for path in later):
        raise MokkaError(f"{root}: not a fresh root (it has {', '.join(str(p) for p in later if p.exists())})")
    base, doc, fingerprints, base_json = resolved.resolve(spec)
    fingerprints = {**fingerprints, **{str(path): fingerprint(path) for path in later}}
    spec, node = rooted, apply(base, doc)
    found = installed.installed() if surfaces is None else dict(surfaces)
    instances = {name: cls() for name, cls in found.items()}
    ctx = with_contributions(context(root, booted_ms=time.time_ns() // 1_000_000), node, instances)
    # the setter record and its library belong to the gpu surface: without it staged, nothing follows MIG
    gpu_staged = "gpu" in instances and enabled(node, "gpu")
    record = mig_boot.boot_record(node, ctx) if mig_boot.wanted(node) and gpu_staged else None
    if record is not None:
        ctx = ctx._replace(mig=mig_boot.partitions(record))
    plans = {name: surface.plan(node, ctx) for name, surface in instances.items() if enabled(node, name)}
    programs = {name: service for name, (_, service) in services(node, instances, root).items()}
    if os.geteuid() == 0 and gpu_staged and any(gpu.config.mig and gpu.config.mig.gpu_instance_profiles
                                                for gpu in node.gpus):
        # what `mokka node up`'s daemon does itself: a partition nvidia-smi changes in CMD is re-staged (only
        # root can change one: the library refuses anyone else, as the driver does)
        programs[FOLLOW_SERVICE] = Service(FOLLOW_SERVICE, [sys.executable, "-m", "mokka_core.node.follow",
                                                            "--root", str(root)])
    return NodePlan(spec, root, plans, fingerprints, base, base_json, doc, node, found, programs,
                    consumer_needs(node, instances, root), ctx.booted_ms, record)


def stage_node(node: NodePlan, workdir: Path, cached: stage_cache.Claim | None = None) -> StagedNode:
    """Stage the plans all-or-nothing under ``node.root`` and record the NodeSpec (and snapshot) for nvml-mock-ctl.

    ``cached`` (inside ``mokka run``'s namespace): the root is an overlay over that cached tree (built
    first where it is new), and staging onto it writes only the entries that differ from it.
    """
    started = time.monotonic()
    each = {name: entry_digests(plan) for name, plan in node.plans.items()}
    digests = {name: plan_digest(plan, each[name]) for name, plan in node.plans.items()}
    with _quiet_rootless_staging():
        tree = _cached_tree(node, cached, each, digests) if cached is not None else None
        shown = tree is not None and _overlay(tree, workdir, node.root)
        if shown and cached is not None:
            try:
                staged = _stage_plans(node, each, held=cached.held_as_planned(digests))
            except (MokkaError, OSError) as exc:  # a cached tree its manifests do not describe: never again
                log.debug("the cached tree %s is not what its manifests say (%s): staging in full", tree, exc)
                cached.discard()
                namespace.umount(str(node.root))
                shown = False
            else:
                if cached.built:
                    cached.judge(staged, each)
        if not shown:
            node.root.mkdir(exist_ok=True)
            _stage_plans(node, each)
    if node.mig_record is not None:
        mig_boot.publish(node.root, node.mig_record)
    nodefile.save(node.root, node.spec, node.booted_ms)
    # what a node daemon's render leaves, so the first nvml-mock-ctl change is as fast as the next
    snapshot.save(node.root, node.base, node.spec.override_file or Path(), node.override_doc, node.fingerprints,
                  node.installed, digests, node.base_json)
    return StagedNode(workdir, node.root, tuple(node.plans), time.monotonic() - started)


def _stage_plans(node: NodePlan, each: dict[str, list[str]], held: Collection[str] = ()) -> dict[str, list[Entry]]:
    """Stage the plans of every surface but those ``held`` as planned already; the plans staged."""
    plans = {name: plan for name, plan in node.plans.items() if name not in held}
    if plans:
        stage_wave(plans, node.root, each)
    for surface in set(staged_surfaces(node.root)) - set(node.plans):  # a cached tree's others
        teardown(node.root, surface)
    return plans


def _cached_tree(node: NodePlan, cached: stage_cache.Claim, each: dict[str, list[str]],
                 digests: dict[str, str]) -> Path | None:
    """The cached tree to show the root from; a new entry's is staged first (a failure there only costs time:
    staging the root itself reports what is wrong with the plans)."""
    if cached.built:
        return cached.tree
    try:
        stage_wave(node.plans, cached.tree, each)
        return cached.publish(node.plans, digests)
    except (MokkaError, OSError) as exc:
        log.debug("the staged tree was not cached: %s", exc)
        return None


def _overlay(lower: Path, workdir: Path, root: Path) -> bool:
    """Mount ``root`` as an overlay of ``lower`` whose upper layer is in ``workdir``; False where this kernel
    (or user namespace) refuses, said in one debug line."""
    if any(c in str(lower) for c in ",:\\"):  # the option string's separators
        log.debug("the cached tree %s has a name an overlay option cannot hold: staging in full", lower)
        return False
    for part in ("upper", "work", root.name):
        (workdir / part).mkdir()
    try:
        namespace.mount("mokka", str(root), "overlay", 0,
                        f"lowerdir={lower},upperdir={workdir / 'upper'},workdir={workdir / 'work'}")
    except namespace.NamespaceError as exc:
        log.debug("no overlay of the cached tree (%s): staging in full", exc)
        return False
    return True


WORKDIR_PREFIX = "mokka-run-"
FOLLOW_SERVICE = "mokka-mig-follow"  # mokka_core.node.follow


@contextlib.contextmanager
def private_workdir() -> Iterator[Path]:
    """``mokka-run-<pid>_<random>`` in the temp dir, removed after; one a SIGKILLed run left is removed
    by the next run (its owner pid is gone)."""
    remove_stale_workdirs(Path(tempfile.gettempdir()))
    workdir = Path(tempfile.mkdtemp(prefix=f"{WORKDIR_PREFIX}{os.getpid()}_"))
    try:
        yield workdir
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def remove_stale_workdirs(parent: Path) -> None:
    for path in parent.glob(f"{WORKDIR_PREFIX}*_*"):
        owner = path.name.removeprefix(WORKDIR_PREFIX).split("_", 1)[0]
        try:
            if not owner.isdigit() or path.lstat().st_uid != os.getuid() or not path.is_dir():
                continue
            os.kill(int(owner), 0)
        except ProcessLookupError:
            log.info("removing %s (its mokka run, pid %s, is gone)", path, owner)
            shutil.rmtree(path, ignore_errors=True)
        except OSError:  # alive (another user's), or unreadable: not ours to judge
            continue


def interrupted() -> bool:
    """Whether Ctrl-C, SIGTERM or SIGHUP is pending (they are held while mokka run sets up)."""
    pending = signal.sigpending()
    return any(sig in pending for sig in STOPPING_SIGNALS)


def start_services(running: Services) -> None:
    """Start the node's services and wait until they are ready."""
    started = time.monotonic()
    running.start()
    running.wait_ready(interrupted=interrupted)
    log.debug("phase services: %.3fs (%s ready)", time.monotonic() - started, ", ".join(sorted(running.services)))


def let_services_go(running: Services, pid: int, rootless: bool) -> None:
    """Once ``pid``'s namespace is set up: let the held services join it and run, and wait until they are ready."""
    released = time.monotonic()
    running.release(joining=(pid, rootless))
    running.wait_ready(interrupted=interrupted, seen_from=Path(f"/proc/{pid}/root"))
    log.debug("phase services: %.3fs (started with the staging; %s ready)", time.monotonic() - released,
              ", ".join(sorted(running.services)))


@contextlib.contextmanager
def _quiet_rootless_staging() -> Iterator[None]:
    staging_log = logging.getLogger("mokka_core.stage.staging")
    level = staging_log.level
    if os.geteuid() != 0:
        # one line instead of one warning per device node
        log.info("not root: device nodes are staged as regular files")
        staging_log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        staging_log.setLevel(level)


def loader_cache(staged: StagedNode) -> None:
    """Inside the namespace, once the library is at its real path: a private ld.so.cache that lists it.

    ``ldconfig -p`` then names ``/usr/lib/<multiarch>/libnvidia-ml.so.1`` as on a real node; the
    cache is built by the real ldconfig (``-X``: never creating links) from the host's own
    configuration and bound over ``/etc/ld.so.cache``.  Without ldconfig or a host cache the
    loader still finds the library in its default directory.  What ldconfig makes depends only on
    the host's cache and configuration and on the names staged (the paths are the real ones, the
    same every run), so it is kept in Mokka's cache (``ld.so.cache/``) under those.
    """
    if not (staged.root / LIB_DIR).is_dir() or not Path("/etc/ld.so.cache").is_file():
        return
    cache = staged.workdir / "ld.so.cache"
    stamp = hashlib.sha256(" ".join(sorted(os.listdir(staged.root / LIB_DIR))).encode())
    for host_file in ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d"):
        with contextlib.suppress(OSError):
            st = os.stat(host_file)
            stamp.update(f"{host_file}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}".encode())
    kept = user_cache("ld.so.cache") / stamp.hexdigest()[:32]
    with contextlib.suppress(OSError):
        cache.write_bytes(kept.read_bytes())
        namespace.mount(str(cache), "/etc/ld.so.cache", None, namespace.MS_BIND)
        return
    ldconfig = shutil.which("ldconfig") or next(
        (p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if os.access(p, os.X_OK)), None)
    if ldconfig is None:
        log.warning("ldconfig not found: the loader cache does not list the NVML library "
                    "(dlopen still finds it in /%s)", LIB_DIR)
        return
    done = subprocess.run([ldconfig, "-X", "-C", str(cache)], capture_output=True, text=True)
    if done.returncode != 0 or not cache.exists():
        raise MokkaError(f"ldconfig could not build the private loader cache: {done.stderr.strip()}")
    with contextlib.suppress(OSError):
        kept.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(kept, cache.read_bytes())
    namespace.mount(str(cache), "/etc/ld.so.cache", None, namespace.MS_BIND)


def preload_library() -> Path | None:
    directory = native_dir()
    lib = directory / PRELOAD_LIB if directory else None
    return lib if lib is not None and lib.exists() else None


def run_in_namespace(spec: NodeSpec, argv: list[str], surfaces: Mapping[str, type[Surface]] | None = None,
                     env: Mapping[str, str] | None = None) -> int:
    """Run ``argv`` in a private mount namespace that shows the node at the real paths.

    The node is planned here, then staged by the child inside the namespace onto a
    tmpfs over the private work directory: fast (no disk), and it vanishes with the
    namespace; outside, only the empty work directory exists until we remove it.
    """
    rootless = os.geteuid() != 0
    with private_workdir() as workdir, contextlib.ExitStack() as stack:
        started = time.monotonic()
        node = plan_node(spec, workdir / "root", surfaces)
        log.debug("phase plan: %.3fs", time.monotonic() - started)
        cached = stage_cache.claim(stage_cache.key(resolved.key(spec), node.plans))
        if cached is not None:
            stack.callback(cached.release)
        child_env = node.needs.apply({**(os.environ if env is None else env), "MOKKA_ROOT": str(node.root)})

        def setup(env: dict[str, str]) -> list[str]:
            started = time.monotonic()
            namespace.unshare_mount_namespace(rootless, hostname=node.node.node_name)
            namespace.mount("mokka", str(workdir), "tmpfs", namespace.MS_NOSUID, "mode=755")
            staged = stage_node(node, workdir, cached)
            log.debug("phase stage: %.3fs (unshare, tmpfs, %s; %s)", time.monotonic() - started,
                      ", ".join(staged.surfaces) or "nothing",
                      "no cached tree" if cached is None else "cached tree" if cached.built else "tree cached now")
            mounted = time.monotonic()
            ops, launcher = _show_at_real_paths(staged)
            log.debug("phase mount: %.3fs (%d mount operations, the loader cache)", time.monotonic() - mounted, ops)
            return launcher

        if not node.services:
            return supervise(argv, child_env, setup)
        # the services run where CMD does: in its namespace, once it is set up.  They start now, held, so
        # their start-up overlaps the staging; they join the namespace when let go
        with Services(node.root, node.services, log_path=workdir / SERVICE_LOG) as running:
            running.start(held=True)
            return supervise(argv, child_env, setup, set_up=lambda pid: let_services_go(running, pid, rootless))


def run_on_root(root: Path, argv: list[str], env: Mapping[str, str] | None = None) -> int:
    """Run ``argv`` in a private mount namespace that shows a node already staged under ``root``.

    The root is seen through an overlay on a private tmpfs, so what showing it needs
    (mount points for /dev's basics) never lands in the staged tree on disk.
    """
    rootless = os.geteuid() != 0
    child_env = {**(os.environ if env is None else env), "MOKKA_ROOT": str(root.absolute())}
    with held_signals(), private_workdir() as workdir:

        def setup(env: dict[str, str]) -> list[str]:
            namespace.unshare_mount_namespace(rootless)
            namespace.mount("mokka", str(workdir), "tmpfs", namespace.MS_NOSUID, "mode=755")
            for part in ("upper", "work", "root"):
                (workdir / part).mkdir()
            namespace.mount("mokka", str(workdir / "root"), "overlay", 0,
                            f"lowerdir={root.absolute()},upperdir={workdir / 'upper'},workdir={workdir / 'work'}")
            return _show_at_real_paths(StagedNode(workdir, workdir / "root", (), 0.0))[1]

        return supervise(argv, child_env, setup)


def _show_at_real_paths(staged: StagedNode) -> tuple[int, list[str]]:
    """In the fresh namespace: mount the staged tree over the real paths.  The number of mount operations,
    and what CMD is to be exec'd through (:func:`proc_files_launcher`)."""
    plan = namespace.plan_mounts(staged.root, scratch=staged.workdir, private_pts=os.geteuid() != 0)
    for reason in plan.skipped:
        log.warning("not shown: %s", reason)
    namespace.enter(plan)
    loader_cache(staged)
    return len(plan.ops), proc_files_launcher(plan.missing_proc_files)


def proc_files_launcher(missing: Mapping[str, str]) -> list[str]:
    """procfs cannot gain a file, so CMD runs through mokka-proc-files, which answers its opens of each
    missing /proc file with the staged one (static programs included); [] when nothing is missing."""
    if not missing:
        return []
    program = native_program(PROC_FILES_LAUNCHER)
    if program is None:
        log.warning("this kernel has no %s and %s is not built (make -C native install): readers of those "
                    "files see nothing", ", ".join(missing), PROC_FILES_LAUNCHER)
        return []
    say_once(log, f"missing-proc-{os.uname().release}",
             f"this kernel has no {', '.join(missing)}: commands see the node's through {PROC_FILES_LAUNCHER} "
             "(their opens of it are answered with the staged file; stat and access still find none). "
             "Said once per kernel; `mokka run --help` repeats it")
    return [str(program), *(f"{path}={staged}" for path, staged in missing.items()), "--"]


def run_with_shim(spec: NodeSpec, argv: list[str], surfaces: Mapping[str, type[Surface]] | None = None,
                  env: Mapping[str, str] | None = None) -> int:
    """Run ``argv`` with the preload shim redirecting /sys, /dev and /proc paths into the root (no namespace)."""
    shim = preload_library()
    if shim is None:
        raise MokkaError(f"the preload shim is not built ({PRELOAD_LIB} missing from the native directory); "
                         "run `make -C native install`")
    with private_workdir() as workdir:
        node = plan_node(spec, workdir / "root", surfaces)
        staged = stage_node(node, workdir)
        child_env = node.needs.apply({**(os.environ if env is None else env), "MOKKA_ROOT": str(staged.root)})
        with Services(node.root, node.services, log_path=workdir / SERVICE_LOG) as running:
            start_services(running)
            return _run_staged_with_shim(staged, shim, argv, child_env)


def _run_staged_with_shim(staged: StagedNode, shim: Path, argv: list[str], child_env: dict[str, str]) -> int:
    child_env["MOKKA_PRELOAD_LIB"] = str(shim)
    _prepend(child_env, "LD_LIBRARY_PATH", str(staged.root / LIB_DIR), ":")
    wrapper = shim.parent / WRAPPER
    if wrapper.exists():
        return supervise([str(wrapper), *argv], child_env, None)
    _prepend(child_env, "LD_PRELOAD", str(shim), ":")
    return supervise(argv, child_env, None)


def _prepend(env: dict[str, str], name: str, value: str, sep: str) -> None:
    env[name] = f"{value}{sep}{env[name]}" if env.get(name) else value


def supervise(argv: list[str], env: dict[str, str], setup: Callable[[dict[str, str]], list[str]] | None,
              set_up: Callable[[int], None] | None = None) -> int:
    """Fork, run ``setup`` in the child, exec ``argv``; relay signals; return the exit status.

    CMD stays in our process group, so Ctrl-C from the terminal reaches it
    directly; we only forward signals that were sent to us alone (as sudo does).
    ``setup`` runs in the child before exec, may adjust its environment and returns
    a launcher to exec CMD through (a list of arguments that ends before CMD; [] for none).
    ``set_up(pid)`` runs here once the child's setup is done, while it waits to exec
    (the services start in its namespace).  A setup or exec failure comes back over
    a close-on-exec pipe.
    """
    if not argv:
        raise MokkaError("no command given (usage: mokka run [OPTIONS] -- CMD [ARGS...])")
    signal.pthread_sigmask(signal.SIG_BLOCK, WATCHED)  # normally already held by held_signals()
    _raise_if_interrupted()
    token = leftovers.new_token()
    env = {**env, leftovers.RUN_TOKEN: token}
    report_r, report_w = os.pipe2(os.O_CLOEXEC)
    gate = Gate() if set_up is not None else None
    parent = os.getpid()
    # what exists now (the modules, the node's plans) lives until we exit: frozen, no collection walks it
    # again, here, in the child (no copy-on-write of it either) or when the interpreter exits
    gc.freeze()
    pid = os.fork()
    if pid == 0:  # child: never returns
        os.close(report_r)
        _die_with(parent)
        _child(argv, env, setup, report_w, gate.child_end() if gate is not None else None)
    os.close(report_w)
    with os.fdopen(report_r, "rb") as report:
        if set_up is not None and gate is not None:
            gate.parent_end()
            gate.run_when_set_up(pid, set_up)
        failure = report.read().decode(errors="replace")
    status = _wait(pid)
    ended = leftovers.end_leftovers(token)
    if ended:
        log.debug("ended %d process(es) the command left running", ended)
    if failure:
        code, _, message = failure.partition(":")
        raise CommandFailed(int(code), message)
    return status


def _die_with(parent: int) -> None:
    """SIGKILL for this child when ``parent`` dies (even by SIGKILL): CMD never outlives mokka run.

    The kernel sends it when the forking *thread* exits: we fork from the main thread, which outlives it.
    """
    if not namespace.die_with(parent, signal.SIGKILL):
        os._exit(EXIT_SETUP_FAILED)


def _raise_if_interrupted() -> None:
    for sig in STOPPING_SIGNALS:
        if sig in signal.sigpending():
            raise CommandFailed(128 + sig, f"interrupted by {sig.name} before the command started")


class Gate:
    """Holds the child between its setup and its exec: "set up" goes child -> parent, "go" parent -> child.

    Both pipes are close-on-exec, and a closed end means "no": a child whose setup failed
    sends nothing (the report pipe says why); a parent that gives up closes "go" unsent.
    """

    def __init__(self) -> None:
        self.done_r, self.done_w = os.pipe2(os.O_CLOEXEC)
        self.go_r, self.go_w = os.pipe2(os.O_CLOEXEC)

    def child_end(self) -> Gate:
        os.close(self.done_r)
        os.close(self.go_w)
        return self

    def parent_end(self) -> None:
        os.close(self.done_w)
        os.close(self.go_r)

    def wait_for_go(self) -> bool:
        """In the child, after its setup: say so, then whether the parent lets it exec."""
        os.write(self.done_w, b"1")
        return bool(os.read(self.go_r, 1))

    def run_when_set_up(self, pid: int, set_up: Callable[[int], None]) -> None:
        """In the parent: once the child is set up, ``set_up(pid)``, then go; on failure the child exits."""
        try:
            if os.read(self.done_r, 1):
                set_up(pid)
                _raise_if_interrupted()
                os.write(self.go_w, b"1")
        except BaseException:
            os.close(self.go_w)
            os.waitpid(pid, 0)
            raise
        finally:
            os.close(self.done_r)
        os.close(self.go_w)


class CommandFailed(MokkaError):
    """mokka could not start CMD; ``exit_code``: 1 set-up failed, 126 cannot run CMD, 127 CMD not found."""

    def __init__(self, exit_code: int, message: str) -> None:
        self.exit_code = exit_code
        super().__init__(message)


def _child(argv: list[str], env: dict[str, str], setup: Callable[[dict[str, str]], list[str]] | None,
           report_w: int, gate: Gate | None) -> None:
    code = EXIT_SETUP_FAILED
    try:
        if setup is not None:
            argv = [*setup(env), *argv]
        if gate is not None and not gate.wait_for_go():  # the parent gave up (a service failed, a signal)
            os._exit(code)
        for sig in (signal.SIGINT, signal.SIGPIPE, signal.SIGXFSZ, signal.SIGQUIT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, WATCHED)
        code = EXIT_NOT_FOUND
        os.execvpe(argv[0], argv, env)
    except BaseException as exc:  # report everything; never return into the parent's code
        if isinstance(exc, FileNotFoundError) and code == EXIT_NOT_FOUND:
            message = f"{argv[0]}: command not found"
        elif isinstance(exc, OSError) and code == EXIT_NOT_FOUND:
            code, message = EXIT_CANNOT_EXEC, f"{argv[0]}: {exc.strerror}"
        else:
            message = str(exc) or type(exc).__name__
        try:
            os.write(report_w, f"{code}:{message}".encode())
        finally:
            os._exit(code)


#: how often CMD's exit is also looked for without its SIGCHLD: in a process with other threads (a test runner's)
#: the kernel may hand that signal to a thread that does not hold it, where it is discarded
EXIT_CHECK_S = 0.05


def _wait(pid: int) -> int:
    while True:
        info = signal.sigtimedwait(WATCHED, EXIT_CHECK_S)
        if info is None or info.si_signo == signal.SIGCHLD:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done == pid:
                return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)
            continue
        # si_code <= 0: sent by kill(2) and friends to us alone.  From the terminal (SI_KERNEL)
        # the whole foreground group, CMD included, already has it: forwarding would double it.
        if info.si_code <= 0:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, info.si_signo)


def main_run(spec: NodeSpec, argv: list[str], *, use_shim: bool = False,
             surfaces: Mapping[str, type[Surface]] | None = None) -> int:
    """What ``mokka run`` / ``mokka shim`` do; returns CMD's exit status.  ``surfaces``: default installed."""
    try:
        with held_signals():
            return run_with_shim(spec, argv, surfaces) if use_shim else run_in_namespace(spec, argv, surfaces)
    except CommandFailed as exc:
        print(f"mokka: {exc}", file=sys.stderr)
        return exc.exit_code
    except ServiceFailed as exc:
        print(f"mokka: {exc}", file=sys.stderr)
        return EXIT_SETUP_FAILED
