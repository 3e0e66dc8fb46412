"""Services as mokka run starts and stops them: SIGTERM, a bounded wait woken by the exits, then SIGKILL."""

from __future__ import annotations

import logging
import signal
import sys
import time
from pathlib import Path

import pytest

from mokka_core.run.services import Services
from mokka_core.stage.surface import Service
from mokka_core.testing.waiting import wait_for

EXITS_ON_SIGTERM = "import time\nwhile True: time.sleep(1)"  # Python's default SIGTERM action: exit
IGNORES_SIGTERM = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\n" \
                  "while True: time.sleep(1)"


def service(name: str, code: str) -> Service:
    return Service(name=name, command=[sys.executable, "-c", code])


def test_stopping_takes_what_the_services_take_not_the_wait(tmp_path: Path) -> None:
    running = Services(tmp_path, {f"svc{n}": service(f"svc{n}", EXITS_ON_SIGTERM) for n in range(3)})
    running.start()
    processes = list(running.processes.values())
    time.sleep(0.3)
    started = time.monotonic()
    running.stop(wait=20)
    assert time.monotonic() - started < 5
    assert all(process.returncode is not None for process in processes)


def test_a_service_that_ignores_sigterm_is_killed_after_the_wait(tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    log = tmp_path / "services.log"
    running = Services(tmp_path, {"stubborn": service("stubborn", IGNORES_SIGTERM),
                                  "polite": service("polite", EXITS_ON_SIGTERM)}, log_path=log)
    running.start()
    processes = dict(running.processes)
    deadline = time.monotonic() + 30
    while "ready" not in log.read_text() and time.monotonic() < deadline:  # SIGTERM ignored from here on
        time.sleep(0.02)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="mokka_core.run.services"):
        running.stop(wait=0.5)
    assert 0.5 <= time.monotonic() - started < 10
    assert processes["stubborn"].returncode == -9
    assert processes["polite"].returncode == -15
    assert [r.getMessage() for r in caplog.records] == ["service stubborn did not stop within 0.5 s; killing it"]


HELD_MODULE = """
import pathlib, sys
OUT = pathlib.Path(__file__).parent
(OUT / "imported").write_text("yes")

def main(argv):
    (OUT / "ran").write_text(" ".join([pathlib.Path(sys.argv[0]).name, *argv]))
"""


def held_service(tmp_path: Path) -> Service:
    (tmp_path / "heldsvc.py").write_text(HELD_MODULE)
    return Service(name="held", command=[sys.executable, "-m", "heldsvc", "--root", "x"],
                   environment={"PYTHONPATH": str(tmp_path)})


def test_a_held_service_is_imported_at_once_and_runs_its_main_once_released(tmp_path: Path) -> None:
    running = Services(tmp_path, {"held": held_service(tmp_path)})
    try:
        running.start(held=True)
        wait_for(lambda: (tmp_path / "imported").exists(), what="the held service imported")
        process = running.processes["held"]
        assert process.poll() is None and not (tmp_path / "ran").exists()  # held: main has not run
        running.release()
        assert process.wait(timeout=30) == 0
        assert (tmp_path / "ran").read_text() == "heldsvc.py --root x"  # argv as `python -m heldsvc` gives it
    finally:
        running.stop()


def test_a_held_service_never_released_stops_without_running(tmp_path: Path) -> None:
    running = Services(tmp_path, {"held": held_service(tmp_path)})
    running.start(held=True)
    wait_for(lambda: (tmp_path / "imported").exists(), what="the held service imported")
    process = running.processes["held"]
    running.stop(wait=20)
    assert process.returncode in (0, -signal.SIGTERM) and not (tmp_path / "ran").exists()


def test_a_held_program_that_is_not_a_module_starts_once_released(tmp_path: Path) -> None:
    # nothing to import ahead (a native program starts in a few ms): no interpreter is held for it
    marker = tmp_path / "ran"
    running = Services(tmp_path, {"plain": service("plain", f"open({str(marker)!r}, 'w').write('ran')")})
    try:
        running.start(held=True)
        time.sleep(0.5)
        assert "plain" not in running.processes and not marker.exists()
        running.release()
        assert running.processes["plain"].wait(timeout=30) == 0 and marker.read_text() == "ran"
    finally:
        running.stop()
