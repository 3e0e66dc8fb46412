"""Figures for the node daemon and nvml-mock-ctl (targets in brackets: median / p90).

    python packages/mokka-core/bench/bench_node.py [--profile h100] [--gpus 8] [--runs 20] [--dir /dev/shm]
    python packages/mokka-core/bench/bench_node.py --profile gb200 --gpus 72 --only ctl

* up: start of ``run()`` to ready, staged and published, all installed surfaces, no services (<= 250 ms on tmpfs)
* teardown: stop request to every surface removed (<= 50 ms)
* mokka node up (process): interpreter start to ready, services under supervisord included (reported only)
* idle: ``mokka node up`` with every installed surface and its services, at rest for ``--idle-seconds``
  (60): CPU of the daemon and every process under it (utime + stime, /proc/<pid>/stat) <= 0.5% of one
  core, their RSS summed (VmRSS, /proc/<pid>/status) <= 60 MB; PSS (smaps_rollup) beside it, since
  RSS counts the interpreter's shared pages once per process.  Measured once the daemon rests in its
  lean form (``--rest-after``, as ``mokka node up``'s; 0: it never rests, the figures of a daemon awake)
* rest: ``nvml-mock-ctl temp`` as a new process on a ``mokka node up`` daemon at rest (``--rest-after 1``),
  from its start to a consumer seeing the change: the daemon's own start (imports, surfaces) included;
  beside it the same on the daemon awake (the ctl run right after the one before)
* run: ``mokka run --profile P -- true`` as a new process, interpreter start to exit, services
  started and stopped (<= 300 ms median; needs root or user namespaces), and where its time goes
  (the ``phase`` lines ``mokka run`` logs at debug level: plan, stage, mount, services, stop)
* ctl: ``nvml-mock-ctl temp`` (NVML only) and ``fail fallen-off-bus``/``fail healthy`` (NVML and PCI)
  as a new process on a node the daemon runs (it takes the command over its ctl socket); from its
  start to a consumer seeing the change (h100 x 8: <= 100 ms median, <= 150 ms p90, interpreter
  start-up included; gb200 x 72: <= 150 ms) and from its exit to the change (<= 20 ms); and, side by
  side, ``temp`` run in its own process (``MOKKA_CTL_IN_PROCESS=1``: a node without a daemon), with
  and without a snapshot (the node resolved from its files)

Python's bytecode caches count: an installed package has them, an editable install writes them on
first use unless PYTHONDONTWRITEBYTECODE is set (``make setup`` compiles them).

The consumer watches the NVML state file the mock library reads (by inode/mtime/size, every 0.5 ms,
as the library does every few ms); without one it watches the node's snapshot the re-render writes.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from mokka_core.model.spec import NodeSpec
from mokka_core.node.runstate import RunState
from mokka_core.node.settings import REST_AFTER_S, NodeSettings
from mokka_core.stage.paths import NVML_STATE_FILE
from mokka_core.stage.store import SNAPSHOT
from mokka_core.testing.processes import descendants
from mokka_core.testing.runner import DaemonRunner


def figures(label: str, seconds: list[float], target: float | None = None, median_target: float | None = None) -> str:
    """One line of figures; ``target`` bounds the p90, ``median_target`` the median (seconds)."""
    ms = sorted(s * 1000 for s in seconds)
    p90 = ms[min(len(ms) - 1, int(len(ms) * 0.9))]
    over = []
    if target is not None and p90 > target * 1000:
        over.append(f"p90 OVER {target * 1000:.0f} ms")
    if median_target is not None and statistics.median(ms) > median_target * 1000:
        over.append(f"median OVER {median_target * 1000:.0f} ms")
    verdict = "" if target is None and median_target is None else ("  " + ", ".join(over) if over else "  ok")
    return (f"{label:<44} median {statistics.median(ms):7.1f} ms  p90 {p90:7.1f} ms  max {ms[-1]:7.1f} ms"
            f"  (n={len(ms)}){verdict}")


def bench_up(spec: NodeSpec, runs: int) -> tuple[list[float], list[float], list[float], int]:
    up, down, cpu = [], [], []
    entries = 0
    for _ in range(runs):
        root = Path(tempfile.mkdtemp(prefix="mokka-bench-"))
        settings = NodeSettings(root=root, spec=spec, supervise=False, watch=False)
        started, cpu_started = time.monotonic(), time.process_time()
        with DaemonRunner(settings) as runner:
            up.append(time.monotonic() - started)
            cpu.append(time.process_time() - cpu_started)
            entries = sum(1 for _ in root.rglob("*"))
            down.append(runner.stop())
        shutil.rmtree(root, ignore_errors=True)
    return up, down, cpu, entries


def bench_up_process(spec: NodeSpec, runs: int) -> list[float]:
    mokka = shutil.which("mokka") or str(Path(sys.executable).with_name("mokka"))
    times = []
    for _ in range(runs):
        root = Path(tempfile.mkdtemp(prefix="mokka-bench-"))
        started = time.monotonic()
        daemon = subprocess.Popen([mokka, "node", "up", "--profile", spec.profile or "h100", "--gpus",
                                   str(spec.gpus or 8), "--root", str(root)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while True:
            state = RunState.load(root)
            if state is not None and state.phase == "ready":
                times.append(time.monotonic() - started)
                break
            if daemon.poll() is not None:
                raise SystemExit(f"mokka node up exited with {daemon.returncode}")
            time.sleep(0.002)
        daemon.terminate()
        daemon.wait(30)
        shutil.rmtree(root, ignore_errors=True)
    return times


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime


def memory_kib(pid: int, key: str, name: str) -> int:
    for line in Path(f"/proc/{pid}/{name}").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def node_up(spec: NodeSpec, root: Path, rest_after: float) -> subprocess.Popen[bytes]:
    """``mokka node up`` as a process, once its node is ready (and its daemon at rest, where it rests)."""
    mokka = shutil.which("mokka") or str(Path(sys.executable).with_name("mokka"))
    daemon = subprocess.Popen([mokka, "node", "up", "--profile", spec.profile or "h100", "--gpus",
                               str(spec.gpus or 8), "--root", str(root), "--rest-after", str(rest_after)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_ready(daemon, root, rest_after > 0)
    return daemon


def wait_ready(daemon: subprocess.Popen[bytes], root: Path, resting: bool) -> None:
    while (state := RunState.load(root)) is None or state.phase != "ready" or (resting and not state.resting):
        if daemon.poll() is not None:
            raise SystemExit(f"mokka node up exited with {daemon.returncode}")
        time.sleep(0.01)


def bench_idle(spec: NodeSpec, seconds: float, rest_after: float) -> list[str]:
    """A node daemon with every surface and service at rest: CPU share and memory, in total and per process."""
    root = Path(tempfile.mkdtemp(prefix="mokka-bench-"))
    daemon = node_up(spec, root, rest_after)
    try:
        time.sleep(2)  # the services' own start-up is not rest
        pids = [daemon.pid, *descendants(daemon.pid)]
        before = {pid: cpu_ticks(pid) for pid in pids}
        time.sleep(seconds)
        used = {pid: cpu_ticks(pid) - before[pid] for pid in pids}
        rss = {pid: memory_kib(pid, "VmRSS", "status") for pid in pids}
        pss = {pid: memory_kib(pid, "Pss", "smaps_rollup") for pid in pids}
        names = {pid: " ".join(Path(f"/proc/{pid}/cmdline").read_text().split("\0")[:4])[-60:] for pid in pids}
    finally:
        daemon.terminate()
        daemon.wait(30)
        shutil.rmtree(root, ignore_errors=True)
    hz = os.sysconf("SC_CLK_TCK")
    share = 100 * sum(used.values()) / hz / seconds
    total_rss, total_pss = sum(rss.values()) / 1024, sum(pss.values()) / 1024
    verdict = [f"CPU {'ok' if share <= 0.5 else 'OVER 0.5%'}", f"RSS {'ok' if total_rss <= 60 else 'OVER 60 MB'}"]
    label = f"idle {seconds:.0f} s, {len(pids)} processes" + (", daemon awake" if rest_after <= 0 else "")
    lines = [f"{label:<44} CPU {share:5.2f}% of one core"
             f"  RSS {total_rss:6.1f} MB  PSS {total_pss:6.1f} MB  ({', '.join(verdict)})"]
    for pid in pids:
        lines.append(f"  {names[pid]:<60} CPU {100 * used[pid] / hz / seconds:5.2f}%  RSS {rss[pid] / 1024:5.1f} MB"
                     f"  PSS {pss[pid] / 1024:5.1f} MB")
    return lines


def bench_rest(spec: NodeSpec, runs: int) -> tuple[list[float], list[float]]:
    """``nvml-mock-ctl temp`` start to visible on a ``mokka node up`` daemon at rest, and on it awake."""
    ctl = shutil.which("nvml-mock-ctl") or str(Path(sys.executable).with_name("nvml-mock-ctl"))
    root = Path(tempfile.mkdtemp(prefix="mokka-bench-"))
    daemon = node_up(spec, root, 1.0)
    watched = root / NVML_STATE_FILE
    at_rest, awake = [], []
    try:
        for n in range(runs):
            for k, out in enumerate((at_rest, awake)):  # the second one finds the daemon the first woke
                before = signature(watched)
                started = time.monotonic()
                subprocess.run([ctl, "--root", str(root), "temp", "0", str(30 + (2 * n + k) % 60)],
                               stdout=subprocess.DEVNULL, check=True)
                while signature(watched) == before:
                    time.sleep(0.0005)
                out.append(time.monotonic() - started)
            wait_ready(daemon, root, True)
    finally:
        daemon.terminate()
        daemon.wait(30)
        shutil.rmtree(root, ignore_errors=True)
    return at_rest, awake


def signature(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def bench_ctl(spec: NodeSpec, runs: int, change: Callable[[int], list[str]],
              full: bool = False, in_process: bool = False) -> tuple[list[float], list[float], list[float], str]:
    ctl = shutil.which("nvml-mock-ctl") or str(Path(sys.executable).with_name("nvml-mock-ctl"))
    root = Path(tempfile.mkdtemp(prefix="mokka-bench-"))
    from_start, after_exit, cpu = [], [], []
    settings = NodeSettings(root=root, spec=spec, supervise=False)
    env = {**os.environ, "MOKKA_CTL_IN_PROCESS": "1"} if in_process else None
    with DaemonRunner(settings):
        watched = root / NVML_STATE_FILE
        if not watched.exists():
            watched = root / SNAPSHOT
        for n in range(runs):
            before = signature(watched)
            cpu_before = children_cpu() + time.process_time()  # the ctl process and the daemon (a thread here)
            started = time.monotonic()
            if full:  # as if there were no snapshot: the node resolved from its files, pydantic and all
                (root / SNAPSHOT).unlink(missing_ok=True)
            proc = subprocess.Popen([ctl, "--root", str(root), *change(n)], stdout=subprocess.DEVNULL, env=env)
            seen = exited = None
            while seen is None or exited is None:
                if seen is None and signature(watched) != before:
                    seen = time.monotonic()
                if exited is None and proc.poll() is not None:
                    exited = time.monotonic()
                    if proc.returncode != 0:
                        raise SystemExit(f"nvml-mock-ctl failed with {proc.returncode}")
                time.sleep(0.0005)
            cpu.append(children_cpu() + time.process_time() - cpu_before)
            from_start.append(seen - started)
            after_exit.append(max(0.0, seen - exited))
            time.sleep(0.2)  # let the daemon's own re-render of the change finish
    shutil.rmtree(root, ignore_errors=True)
    return from_start, after_exit, cpu, os.path.relpath(watched, root)


RUN_WITH_PHASES = """
import logging, sys
logging.basicConfig(level=logging.DEBUG, format="%(message)s", stream=sys.stderr)
from mokka_core.cli.mokka import main
sys.argv = ["mokka", "run", "--profile", sys.argv[1], "--gpus", sys.argv[2], "--", "true"]
main()
"""


def mokka_command() -> list[str]:
    """``mokka`` as a user runs it: the console script beside this interpreter (``python -m mokka_core`` adds runpy's
    ~5 ms where there is none)."""
    script = Path(sys.executable).with_name("mokka")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "mokka_core"]


def bench_run(spec: NodeSpec, runs: int) -> tuple[list[float], dict[str, list[float]]]:
    """``mokka run -- true`` wall times, and each phase's seconds as the run logged them."""
    totals: list[float] = []
    phases: dict[str, list[float]] = {}
    for _ in range(runs):
        started = time.monotonic()
        done = subprocess.run([*mokka_command(), "run", "--profile", str(spec.profile),
                               "--gpus", str(spec.gpus), "--", "true"], capture_output=True, text=True)
        totals.append(time.monotonic() - started)
        if done.returncode != 0:
            raise SystemExit(f"mokka run failed: {done.stderr.strip()}")
        logged = subprocess.run([sys.executable, "-c", RUN_WITH_PHASES, str(spec.profile), str(spec.gpus)],
                                capture_output=True, text=True)
        for line in logged.stderr.splitlines():
            if line.startswith("phase "):
                name, seconds = line.removeprefix("phase ").split(":", 1)
                phases.setdefault(name, []).append(float(seconds.split()[0].rstrip("s")))
    return totals, phases


def bench_import_floor(runs: int) -> tuple[list[float], list[float]]:
    """What any process that resolves a node pays before doing anything: interpreter + node-state imports."""
    bare, state = [], []
    for _ in range(runs):
        for code, out in (("pass", bare), ("import mokka_core.model.resolve", state)):
            started = time.monotonic()
            subprocess.run([sys.executable, "-c", code], check=True,
                           env={**os.environ, "PYDANTIC_DISABLE_PLUGINS": "__all__"})
            out.append(time.monotonic() - started)
    return bare, state


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="h100")
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--dir", default=None, help="where to make the node roots (e.g. /dev/shm for tmpfs)")
    parser.add_argument("--only", choices=("up", "ctl", "idle", "rest", "run"), default=None,
                        help="only these figures")
    parser.add_argument("--idle-seconds", type=float, default=60.0, help="how long the idle node is measured")
    parser.add_argument("--rest-after", type=float, default=REST_AFTER_S,
                        help="mokka node up --rest-after for the idle figures (0: the daemon stays awake)")
    args = parser.parse_args()
    if args.dir:
        tempfile.tempdir = args.dir
    spec = NodeSpec(profile=args.profile, gpus=args.gpus)
    print(f"node: {args.profile} x {args.gpus}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}, "
          f"roots under {tempfile.gettempdir()}")
    large = len(spec.resolve().gpus) > 8
    if args.only in (None, "idle"):
        print("\n".join(bench_idle(spec, args.idle_seconds, args.rest_after)))
    if args.only == "idle":
        return
    if args.only in (None, "rest"):
        at_rest, awake = bench_rest(spec, max(3, args.runs // 2))
        print(figures("rest: ctl start to visible, daemon at rest", at_rest))
        print(figures("rest: ctl start to visible, daemon awake", awake))
    if args.only == "rest":
        return
    if args.only in (None, "run"):
        totals, phases = bench_run(spec, max(5, args.runs // 2))
        print(figures("mokka run -- true (process, services)", totals, None, 0.3))
        for name, seconds in phases.items():
            print(figures(f"  phase {name}", seconds))
    if args.only == "run":
        return
    if args.only != "ctl":
        up, down, cpu, entries = bench_up(spec, args.runs)
        print(f"(staged tree: {entries} paths)")
        print(figures("up: staged + published (in-process)", up, None, 0.25))
        print(figures("up: CPU time of the above", cpu))
        print(figures("teardown", down, None, 0.05))
        print(figures("mokka node up process to ready (+services)", bench_up_process(spec, max(3, args.runs // 4))))
    if args.only == "up":
        return
    def temp(n: int) -> list[str]:
        return ["temp", "0", str(30 + n % 60)]

    # (change, no snapshot, in its own process): the targets are for the node as `mokka node up` runs it,
    # which takes the command over its ctl socket; in its own process is what a node without a daemon gets
    changes: dict[str, tuple[Callable[[int], list[str]], bool, bool]] = {
        "temp": (temp, False, False),
        "fail/heal (nvml + pci)": (lambda n: ["fail", "1", "healthy" if n % 2 else "fallen-off-bus"], False, False),
        "temp, in its own process (MOKKA_CTL_IN_PROCESS=1)": (temp, False, True),
        "temp, in its own process, no snapshot (node resolved from its files)": (temp, True, True),
    }
    for label, (change, full, in_process) in changes.items():
        from_start, after_exit, cpu, watched = bench_ctl(spec, args.runs if not full else max(3, args.runs // 4),
                                                         change, full, in_process)
        print(f"(ctl {label}; consumer watches /{watched})")
        target = (None, None) if full or in_process else ((0.15, 0.15) if large else (0.15, 0.1))
        print(figures("ctl: start to visible (new process)", from_start, *target))
        print(figures("ctl: CPU time (ctl process + daemon)", cpu))
        print(figures("ctl: exit to visible", after_exit, 0.02))
    bare, state = bench_import_floor(max(3, args.runs // 2))
    print(figures("floor: python -c pass", bare))
    print(figures("floor: python -c 'import mokka_core.model.resolve'", state))


if __name__ == "__main__":
    main()
