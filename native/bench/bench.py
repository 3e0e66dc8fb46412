#!/usr/bin/env python3
"""Mock libnvidia-ml benchmarks, each measured side by side with its baseline in one run.

Prints ratios against the issue-3 targets and the getters' cost against issue 20's; never part of pass/fail
tests.
  python native/bench/bench.py [--runs N] [--baseline-lib OTHER_BUILD/libnvidia-ml.so.1]
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

NATIVE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(NATIVE / "tests"))
from mkstate import consumers, make_state, write_state  # noqa: E402  (mkstate: the one mokka-core import)
from visibility import MIG_READER, SETTING_READER  # noqa: E402

BUILD = NATIVE / "build"
# bench_tool getters' lines: its name for a getter, what the table calls it
GETTERS = (("temperature", "nvmlDeviceGetTemperature"), ("memory", "nvmlDeviceGetMemoryInfo"),
           ("name", "nvmlDeviceGetName"), ("uuid", "nvmlDeviceGetUUID"),
           ("memory_v2", "nvmlDeviceGetMemoryInfo_v2 (versioned struct)"), ("clock", "nvmlDeviceGetClockInfo"),
           ("power", "nvmlDeviceGetPowerUsage"), ("temperature_dynamic", "nvmlDeviceGetTemperature, dynamic model"))
DYNAMIC_GPU1 = {"device.1.dynamic.temperature": 1, "device.1.dynamic.temperature.base_c": 50,
                "device.1.dynamic.temperature.variance_c": 5}


def spawn(tool: Path, runs: int, cmd: list[str], env: dict[str, str]) -> tuple[float, int, int]:
    """Median wall ms, peak RSS KiB and exit status of `cmd`, spawned by the small C helper."""
    out = subprocess.run([str(tool), "spawn", str(runs), *cmd], env=env, capture_output=True, text=True, check=True)
    ms, rss, rc = out.stdout.split()
    return float(ms), int(rss), int(rc)


def side_by_side(tool: Path, runs: int, a: tuple[list[str], dict], b: tuple[list[str], dict]):
    """Alternate a and b in small rounds so both see the same machine load; medians of each."""
    ra, rb = [], []
    for _ in range(max(1, runs // 5)):
        ra.append(spawn(tool, 5, *a))
        rb.append(spawn(tool, 5, *b))
    med = lambda r: (statistics.median(x[0] for x in r), max(x[1] for x in r), r[-1][2])  # noqa: E731
    return med(ra), med(rb)


def perf_share(smi: Path, env: dict[str, str], tmp: Path) -> float | None:
    """Percentage of `nvidia-smi -q` CPU samples inside libnvidia-ml (None without perf)."""
    data = tmp / "perf.data"
    loop = f"for i in $(seq 20); do {smi} -q >/dev/null; done"
    try:
        subprocess.run(["perf", "record", "-q", "-F", "20000", "-o", str(data), "--", "sh", "-c", loop], env=env,
                       capture_output=True, check=True, timeout=120)
        rep = subprocess.run(["perf", "report", "-i", str(data), "--stdio", "--sort", "dso"], capture_output=True,
                             text=True, check=True, timeout=120).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in rep.splitlines():
        if "libnvidia-ml" in line:
            return float(line.split("%")[0])
    return 0.0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=41)
    ap.add_argument("--baseline-lib", metavar="LIB",
                    help="another build's libnvidia-ml.so.1: its getters timed in the same batches, as the baseline")
    a = ap.parse_args()
    subprocess.run(["make", "-s", "-C", str(NATIVE), f"PYTHON={sys.executable}"], check=True)
    tmp = Path(tempfile.mkdtemp(prefix="mokka-bench-"))
    tool = tmp / "bench_tool"
    subprocess.run(["gcc", "-O2", "-o", str(tool), str(NATIVE / "bench" / "bench_tool.c"), "-ldl"], check=True)
    trivial = tmp / "libtrivial.so"
    (tmp / "trivial.c").write_text("int trivial(void) { return 0; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-o", str(trivial), str(tmp / "trivial.c")], check=True)
    state = tmp / "mokka-nvml.state"
    h100 = make_state("h100")  # the built-in h100 profile, rendered by mokka-core
    write_state(state, h100)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MOKKA_NVML", "LD_"))}
    mock_env = {**env, "LD_LIBRARY_PATH": str(BUILD), "MOKKA_NVML_STATE": str(state)}
    empty = tmp / "empty"
    empty.mkdir()
    floor_env = {**env, "LD_LIBRARY_PATH": str(empty)}
    rows = []

    try:
        smi = consumers.nvidia_smi("550")
    except consumers.ConsumerUnavailable as e:
        smi = None
        print(f"nvidia-smi unavailable: {e}")
    if smi:
        mock, floor = side_by_side(tool, a.runs, ([str(smi), "-q"], mock_env), ([str(smi), "-q"], floor_env))
        assert mock[2] == 0, "nvidia-smi -q failed with the mock"
        rows.append(("nvidia-smi -q, h100 x8 vs no library (time)", mock[0], floor[0], "ms", 3.0))
        rows.append(("nvidia-smi -q, h100 x8 vs no library (peak RSS)", mock[1], floor[1], "KiB", 1.3))
        one, floor1 = side_by_side(tool, a.runs, ([str(smi), "-q", "-i", "0"], mock_env), ([str(smi), "-q"], floor_env))
        rows.append(("  (one GPU: nvidia-smi -q -i 0 vs no library)", one[0], floor1[0], "ms", 3.0))
        share = perf_share(smi, mock_env, tmp)
        if share is not None:
            print(f"(perf: the mock library is {share:.1f}% of nvidia-smi -q CPU samples; the rest is nvidia-smi's own "
                  "unbuffered stdout: libc formatting and ~38k write(2) calls for 8 GPUs)")
    lib = BUILD / "libnvidia-ml.so.1"
    mock, triv = side_by_side(tool, a.runs * 2, ([str(tool), "dlopen", str(lib), "nvml"], mock_env),
                              ([str(tool), "dlopen", str(trivial)], mock_env))
    assert mock[2] == 0, f"dlopen+init failed: {mock[2]}"
    rows.append(("dlopen+init+count+shutdown vs dlopen(trivial .so)", mock[0], triv[0], "ms", 1.5))

    # mokka run on a kernel without /proc/modules: every read-only open of the command goes by the supervisor
    shown = tmp / "modules"
    shown.write_text("nvidia 54341632 0 - Live 0x0\n")
    importer = [sys.executable, "-c", "import asyncio, decimal, email.parser, http.client, json"]
    through, plain = side_by_side(tool, a.runs, ([str(BUILD / "mokka-proc-files"), f"/proc/mokka-bench={shown}", "--",
                                                  *importer], env), (importer, env))
    assert through[2] == 0, "python through mokka-proc-files failed"
    rows.append(("python3 start (~1500 opens) via mokka-proc-files vs plain", through[0], plain[0], "ms", 1.3))

    # the hot getters on GPU 0 as profiled, GetTemperature also on GPU 1 with the dynamic model on: one process,
    # each batch of each getter in turn, of each library in turn with --baseline-lib (bench_tool getters)
    getters_state = tmp / "getters.state"
    write_state(getters_state, make_state("h100", overrides=DYNAMIC_GPU1))
    baseline = [str(Path(a.baseline_lib).resolve())] if a.baseline_lib else []
    out = subprocess.run([str(tool), "getters", "20000", *baseline],
                         env={**mock_env, "MOKKA_NVML_STATE": str(getters_state)}, capture_output=True, text=True,
                         check=True)
    per_lib = {name: list(map(float, values)) for name, *values in (line.split() for line in out.stdout.splitlines())}
    ns = {name: values[0] for name, values in per_lib.items()}
    rows.append(("GetTemperature, dynamic model on vs off (ns/call)", ns["temperature_dynamic"], ns["temperature"],
                 "ns", 1.2))

    n = 60
    for k in range(n):
        text = re.sub(r"^device\.0\.temperature\.gpu=\d+$", f"device.0.temperature.gpu={100 + k}", h100, flags=re.M)
        write_state(tmp / f"t{k}.state", text)
    out = subprocess.run([str(tool), "latency", str(state), str(tmp), str(n)], env=mock_env, capture_output=True,
                         text=True, check=True)
    lat_med, lat_max = map(float, out.stdout.split())

    print(f"{'measure':56} {'mock':>10} {'baseline':>10} {'ratio':>7} {'target':>7}")
    for name, mock, base, unit, target in rows:
        ratio = mock / base
        ok = "ok" if ratio <= target else "OVER"
        print(f"{name:56} {mock:10.2f} {base:10.2f} {ratio:7.2f} {'<=' + str(target):>7} {ok}  ({unit})")
    for key, name in GETTERS:  # issue 20: a getter costs at most 20 ns
        base = f"{per_lib[key][1]:10.1f} {ns[key] / per_lib[key][1]:7.2f}" if baseline else f"{'':10} {'':7}"
        print(f"{name + ' median ns/call':56} {ns[key]:10.1f} {base} {'<=20':>7} {'ok' if ns[key] <= 20 else 'OVER'}")
    print(f"{'state change visible, median ms':56} {lat_med:10.2f} {'':10} {'':7} {'<=20':>7} "
          f"{'ok' if lat_med <= 20 else 'OVER'}")
    print(f"{'state change visible, worst ms':56} {lat_max:10.2f} {'':10} {'':7} {'<=50':>7} "
          f"{'ok' if lat_max <= 50 else 'OVER'}")
    for what, reader, overrides in (("setting", SETTING_READER, {}),
                                    ("MIG instance", MIG_READER, {"device.0.mig.current": 1,
                                                                  "device.0.mig.pending": 1})):
        lat = node_state_visible_ms(tmp / what.replace(" ", "-"), env, reader, overrides)
        if lat is None:
            print(f"{what} from another process visible: not measured (setters need root)")
            continue
        for name, value in (("median", statistics.median(lat)), ("worst", max(lat))):
            print(f"{what + ' from another process visible, ' + name + ' ms':56} {value:10.2f} {'':10} {'':7} "
                  f"{'<=5':>7} {'ok' if value <= 5 else 'OVER'}")
    return 0


def node_state_visible_ms(scratch: Path, env: dict[str, str], reader: str, overrides: dict) -> list[float] | None:
    """Latencies (ms) from a changer's exit to a running reader seeing its change (tests/visibility.py);
    5 rounds of 7 changes, each round on a fresh 1-GPU h100 state."""
    if os.geteuid() != 0:
        return None
    scratch.mkdir()
    state = scratch / "mokka-nvml.state"
    lat: list[float] = []
    for _ in range(5):
        write_state(state, make_state("h100", 1, overrides))
        for record in scratch.glob("*.settings"):
            record.unlink()
        out = subprocess.run([sys.executable, "-c", reader, "7", "5"], check=True, capture_output=True, text=True,
                             env={**env, "LD_LIBRARY_PATH": str(BUILD), "MOKKA_NVML_STATE": str(state)})
        lat += [float(x) * 1000 for x in out.stdout.split()]
    return lat


if __name__ == "__main__":
    sys.exit(main())
