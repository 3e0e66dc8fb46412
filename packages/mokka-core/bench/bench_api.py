"""Figures for ``mokka_core.Node`` (targets in brackets, medians).

    python packages/mokka-core/bench/bench_api.py [--runs 15]

* ready: ``Node(...)`` entered, staged, no services (h100 x 8 <= 300 ms, t4 x 1 <= 100 ms)
* ctl -> pynvml: from the start of ``node.ctl("temp", "0", "<C>")`` until this process's pynvml reads
  that temperature, the node active (<= 5 ms), over ``--ctl-runs`` changes (100) of one node: its first
  few changes also build what the next ones reuse, so a short run's median says more about them
"""

from __future__ import annotations

import argparse
import time

from mokka_core import Node


def figures(label: str, seconds: list[float], median_target: float) -> str:
    ms = sorted(s * 1000 for s in seconds)
    median = ms[len(ms) // 2]
    p90 = ms[min(len(ms) - 1, int(len(ms) * 0.9))]
    verdict = "ok" if median <= median_target * 1000 else f"median OVER {median_target * 1000:.0f} ms"
    return f"{label:<36} median {median:7.1f} ms  p90 {p90:7.1f} ms  max {ms[-1]:7.1f} ms  (n={len(ms)})  {verdict}"


def bench_ready(profile: str, gpus: int, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        with Node(profile, gpus=gpus):
            times.append(time.perf_counter() - started)
    return times


def bench_ctl_to_pynvml(runs: int) -> list[float]:
    import pynvml

    times = []
    with Node("h100", gpus=8) as node:
        node.activate()
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        for run in range(runs):
            celsius = 40 + run % 50
            started = time.perf_counter()
            node.ctl("temp", "0", str(celsius))
            while pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU) != celsius:
                pass
            times.append(time.perf_counter() - started)
        pynvml.nvmlShutdown()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--ctl-runs", type=int, default=100)
    args = parser.parse_args()
    bench_ready("t4", 1, 2)  # warm: imports and the surface discovery
    print(figures("Node ready, h100 x 8", bench_ready("h100", 8, args.runs), 0.3))
    print(figures("Node ready, t4 x 1", bench_ready("t4", 1, args.runs), 0.1))
    print(figures("ctl temp -> pynvml reads it", bench_ctl_to_pynvml(args.ctl_runs), 0.005))


if __name__ == "__main__":
    main()
