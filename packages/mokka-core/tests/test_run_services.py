"""Services as mokka run starts and stops them: SIGTERM, a bounded wait woken by the exits, then SIGKILL."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mokka_core.run.services import ServiceFailed, Services, launcher
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


if __name__ == "__main__":
    main(sys.argv[1:])
"""


def held_service(tmp_path: Path, ready_path: str | None = "ready") -> Service:
    (tmp_path / "heldsvc.py").write_text(HELD_MODULE)
    return Service(name="held", command=[sys.executable, "-m", "heldsvc", "--root", "x"],
                   environment={"PYTHONPATH": str(tmp_path)}, ready_path=ready_path)


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


def test_a_module_nothing_waits_for_is_not_held_but_started_once_released(tmp_path: Path) -> None:
    # no ready_path: the command does not wait for it, so its start-up need not overlap the staging
    running = Services(tmp_path, {"held": held_service(tmp_path, ready_path=None)})
    try:
        running.start(held=True)
        time.sleep(0.5)
        assert "held" not in running.processes and not (tmp_path / "imported").exists()
        running.release()
        assert running.processes["held"].wait(timeout=30) == 0
        assert (tmp_path / "ran").read_text() == "heldsvc.py --root x"
    finally:
        running.stop()


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


def test_a_program_that_cannot_run_fails_its_start_with_the_reason(tmp_path: Path) -> None:
    log = tmp_path / "services.log"
    running = Services(tmp_path, {"absent": Service(name="absent", command=[str(tmp_path / "no-such-program")],
                                                    ready_path="ready")}, log_path=log)
    try:
        running.start()
        with pytest.raises(ServiceFailed, match=r"absent exited with status 127\n.*no-such-program: No such file"):
            running.wait_ready(timeout=30)
    finally:
        running.stop()


@pytest.mark.parametrize("args", [[], ["--", "true"], ["x", "--", "true"], ["1", "2", "--", "true"],
                                  ["1", "2", "3", "--", "true"], ["1", "--"]])
def test_the_launcher_refuses_what_it_was_not_meant_to_get(args: list[str]) -> None:
    done = subprocess.run([launcher(), *args], capture_output=True, text=True)
    assert done.returncode == 125 and done.stderr.startswith("mokka-enter: usage:")


def test_the_launcher_refuses_a_parent_that_is_not_its_own() -> None:
    done = subprocess.run([launcher(), "1", "--", "true"], capture_output=True, text=True)
    assert done.returncode == 126 and done.stderr == "mokka-enter: the parent is gone\n"


def test_a_service_whose_starter_is_killed_gets_sigterm(tmp_path: Path) -> None:
    # the starter: a process that starts one service and is then SIGKILLed; the service hears of it at once
    marker = tmp_path / "got-sigterm"
    code = (f"import signal, sys, time, pathlib\n"
            f"mark = lambda *_: (pathlib.Path({str(marker)!r}).write_text('yes'), sys.exit(0))\n"
            f"signal.signal(signal.SIGTERM, mark)\n"
            f"print('up', flush=True)\nwhile True: time.sleep(1)")
    starter = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\nfrom pathlib import Path\nfrom mokka_core.run.services import Services\n"
        "from mokka_core.stage.surface import Service\n"
        f"running = Services(Path({str(tmp_path)!r}), {{'svc': Service('svc', [sys.executable, '-c', {code!r}])}})\n"
        "running.start()\nprint(running.processes['svc'].pid, flush=True)\ntime.sleep(60)")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert starter.stdout is not None
        service_pid = int(starter.stdout.readline())
        assert starter.stdout.readline() == "up\n"  # the service's own first line (same stdout)
        starter.kill()
        wait_for(lambda: marker.exists(), what="the service's SIGTERM")
    finally:
        starter.kill()
        starter.wait()
        if starter.stdout is not None:
            starter.stdout.close()
        with contextlib.suppress(ProcessLookupError):
            os.kill(service_pid, signal.SIGKILL)
