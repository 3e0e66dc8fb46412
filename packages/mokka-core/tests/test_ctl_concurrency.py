"""nvml-mock-ctl under concurrency: no lost updates, no torn reads, daemon and ctl agree."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from mokka_core.ctl.cli import execute
from mokka_core.model.resolve import resolve
from mokka_core.model.spec import NodeSpec
from mokka_core.node.settings import NodeSettings
from mokka_core.stage import nodefile
from mokka_core.testing.runner import PROBE_FILE, DaemonRunner, ProbeSurface
from mokka_core.testing.waiting import wait_for

STEP = 2**29  # half a GiB per change


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    nodefile.save(root, NodeSpec(profile="h100", gpus=2))
    return root


def ctl(root: Path, *argv: str) -> int:
    return execute(["--root", str(root), *argv], surfaces={"probe": ProbeSurface()})


WRITER = """
import sys
from pathlib import Path
from mokka_core.ctl.cli import execute
from mokka_core.testing.runner import ProbeSurface
root, gpu, count = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
for n in range(count):
    assert execute(["--root", str(root), "xid", gpu, str(100 + n)], surfaces={"probe": ProbeSurface()}) == 0
"""


def test_two_writers_at_once_never_lose_an_update(root: Path) -> None:
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(root), gpu, "12"], stdout=subprocess.DEVNULL)
               for gpu in ("0", "1")]
    for writer in writers:
        assert writer.wait(120) == 0
    inputs = nodefile.load(root).inputs()
    node = resolve(inputs)
    events = [event for gpu in node.gpus for event in gpu.config.xid_events]
    assert [len(gpu.config.xid_events) for gpu in node.gpus] == [12, 12]
    assert sorted(event.seq for event in events) == list(range(1, 25))


def test_a_reader_sees_100_successive_changes_without_torn_values(root: Path) -> None:
    assert ctl(root, "temp", "0", "20") == 0
    memory = json.loads((root / PROBE_FILE).read_text())["gpus"]["0"]["memory"]
    total, reserved = memory["total"], memory["reserved"]
    stop = threading.Event()
    seen: list[int] = []
    problems: list[str] = []

    def reader() -> None:
        while not stop.is_set():
            try:
                data = json.loads((root / PROBE_FILE).read_text())
            except (OSError, ValueError) as exc:  # a torn or missing file
                problems.append(repr(exc))
                continue
            gpu = data["gpus"]["0"]
            memory = gpu["memory"]
            if memory["reserved"] + memory["used"] + memory["free"] != memory["total"]:
                problems.append(f"reserved + used + free != total: {memory}")
            if memory["used"] != (gpu["temperature_c"] - 20) * STEP and gpu["temperature_c"] != 20:
                problems.append(f"temperature and memory from different changes: {gpu}")
            if not seen or seen[-1] != gpu["temperature_c"]:
                seen.append(gpu["temperature_c"])
            time.sleep(0.001)

    thread = threading.Thread(target=reader)
    thread.start()
    latencies = []
    try:
        for n in range(1, 101):
            used = n * STEP
            started = time.monotonic()
            assert ctl(root, "set", "0", f"thermal.temperature_gpu_c={20 + n}", f"memory.used_bytes={used}",
                       f"memory.free_bytes={total - reserved - used}") == 0
            latencies.append(time.monotonic() - started)
            # visible the moment the command returns
            assert json.loads((root / PROBE_FILE).read_text())["gpus"]["0"]["temperature_c"] == 20 + n
        wait_for(lambda: seen[-1] == 120, what="the reader's view of the last change")
    finally:
        stop.set()
        thread.join()
    assert not problems, problems[:5]
    assert seen == sorted(seen) and seen[-1] == 120  # never went back to an older value
    assert max(latencies) < 5.0, latencies  # generous: CI shares two cores


def test_ctl_and_a_running_daemon_agree(tmp_path: Path) -> None:
    root = tmp_path / "root"
    surfaces = {"probe": ProbeSurface()}
    settings = NodeSettings(root=root, spec=NodeSpec(profile="h100", gpus=2), supervise=False)
    with DaemonRunner(settings, surfaces):
        assert execute(["--root", str(root), "fail", "1", "fallen-off-bus"], surfaces=surfaces) == 0
        data = json.loads((root / PROBE_FILE).read_text())
        assert data["gpus"]["1"]["lost"]
        assert [(e["code"], e["seq"]) for e in data["gpus"]["1"]["xid_events"]] == [(79, 1)]
        time.sleep(0.3)  # the daemon sees the override change too and finds nothing left to do
        assert json.loads((root / PROBE_FILE).read_text()) == data
