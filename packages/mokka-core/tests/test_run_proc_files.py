"""mokka-proc-files: what a command run through it sees of a /proc file the kernel lacks (``mokka run`` uses it
on kernels without module support, where procfs has no /proc/modules and no mount can add one).

The tests show a file the running kernel never has, ``/proc/mokka-test-<n>``, so they mean the same on every
kernel; the supervisor answers opens for reading only, by path, from any program (a static one too).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mokka_core.run.command import PROC_FILES_LAUNCHER
from mokka_core.stage.native import native_program
from mokka_core.testing.consumers import apt_tool, missing

SHOWN = f"/proc/mokka-test-{os.getpid()}"


@pytest.fixture(scope="module")
def launcher() -> Path:
    program = native_program(PROC_FILES_LAUNCHER)
    if program is None:
        missing(f"{PROC_FILES_LAUNCHER} is not built (make -C native install)")
    return program


@pytest.fixture
def staged(tmp_path: Path) -> Path:
    path = tmp_path / "modules"
    path.write_text("nvidia 54341632 0 - Live 0x0000000000000000\n")
    return path


def through(launcher: Path, staged: Path, *command: str, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(launcher), f"{SHOWN}={staged}", "--", *command], capture_output=True, text=True,
                          timeout=60, **kwargs)


def supervisors_of(staged: Path) -> list[int]:
    """The pids of supervisors still serving ``staged`` (their command line names it)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and str(staged).encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_an_open_for_reading_gets_the_staged_file_however_the_path_is_spelt(launcher: Path, staged: Path) -> None:
    name = SHOWN.removeprefix("/proc/")
    script = f"cat {SHOWN} /proc//{name} /proc/./{name} /proc/self/../{name}; cd /proc && cat {name} ./{name}"
    done = through(launcher, staged, "sh", "-c", script)
    assert done.returncode == 0, done.stderr
    assert done.stdout == staged.read_text() * 6


def test_a_dotdot_after_a_symlink_goes_through_the_link(launcher: Path, staged: Path, tmp_path: Path) -> None:
    """As the kernel walks it: link/.. is the parent of the link's target, not the link's own directory."""
    (tmp_path / "sys").symlink_to("/proc/sys")
    name = SHOWN.removeprefix("/proc/")
    done = through(launcher, staged, "sh", "-c", f"cat {tmp_path}/sys/../{name}; cat {tmp_path}/sys/../../{name}")
    assert done.stdout == staged.read_text(), done.stderr  # the second is /{name}: the kernel's, absent
    assert f"{tmp_path}/sys/../../{name}: No such file" in done.stderr


def test_a_static_program_is_answered_too(launcher: Path, staged: Path) -> None:
    busybox = apt_tool("busybox", "busybox-static")
    if subprocess.run(["ldd", busybox], capture_output=True, text=True).returncode == 0:
        missing(f"{busybox} is not statically linked (apt-get install busybox-static)")
    done = through(launcher, staged, busybox, "cat", SHOWN)
    assert (done.returncode, done.stdout) == (0, staged.read_text()), done.stderr


def test_openat_relative_to_a_directory_descriptor(launcher: Path, staged: Path) -> None:
    code = (f"import os; d = os.open('/proc', os.O_RDONLY | os.O_DIRECTORY); "
            f"fd = os.open('{SHOWN.removeprefix('/proc/')}', os.O_RDONLY, dir_fd=d); "
            f"print(os.read(fd, 4096).decode(), end=''); print(os.get_inheritable(fd))")
    done = through(launcher, staged, sys.executable, "-c", code)
    assert done.returncode == 0, done.stderr
    assert done.stdout == staged.read_text() + "False\n"  # os.open asks O_CLOEXEC: the descriptor keeps it


def test_each_open_reads_the_file_as_it_is_then(launcher: Path, staged: Path) -> None:
    code = (f"import pathlib, sys; shown, staged = pathlib.Path('{SHOWN}'), pathlib.Path(sys.argv[1]); "
            "first = shown.read_text(); staged.write_text('nvidia_uvm 1 0 - Live 0x0\\n'); "
            "print(first + shown.read_text(), end='')")
    done = through(launcher, staged, sys.executable, "-c", code, str(staged))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "nvidia 54341632 0 - Live 0x0000000000000000\nnvidia_uvm 1 0 - Live 0x0\n"


def test_other_opens_stay_with_the_kernel(launcher: Path, staged: Path, tmp_path: Path) -> None:
    code = (f"import os\n"
            f"try: os.open('{SHOWN}', os.O_RDWR)\nexcept FileNotFoundError: print('rdwr absent')\n"
            f"print(os.path.exists('{SHOWN}'))\n"
            f"open('{tmp_path}/written', 'w').write('x'); print(open('{tmp_path}/written').read())\n"
            f"print(open('/proc/version').read().split()[0])\n")
    done = through(launcher, staged, sys.executable, "-c", code)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "rdwr absent\nFalse\nx\nLinux\n"  # stat is not answered: the kernel has no such file


def test_the_supervisor_outlives_the_terminal_signals_and_leaves_with_the_last_process(launcher: Path,
                                                                                       staged: Path) -> None:
    # Ctrl-C goes to the whole foreground process group: the supervisor is in a session of its own
    script = (f"trap '' INT; kill -INT 0; sleep 0.2; cat {SHOWN}; "
              f"(sleep 3; cat {SHOWN} > {staged}.late) >/dev/null 2>&1 &")
    done = through(launcher, staged, "sh", "-c", script, start_new_session=True)
    assert (done.returncode, done.stdout) == (0, staged.read_text()), done.stderr
    assert supervisors_of(staged), "the supervisor left while a process under its filter still ran"
    deadline = time.monotonic() + 20
    while supervisors_of(staged) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not supervisors_of(staged), "the supervisor stayed after the last process under its filter"
    assert Path(f"{staged}.late").read_text() == staged.read_text()  # the background child was answered too


def test_exit_status_and_the_messages_of_a_command_that_cannot_run(launcher: Path, staged: Path,
                                                                   tmp_path: Path) -> None:
    assert through(launcher, staged, "sh", "-c", "exit 7").returncode == 7
    absent = through(launcher, staged, "no-such-command-here")
    assert (absent.returncode, absent.stderr) == (127, "mokka: no-such-command-here: command not found\n")
    (tmp_path / "not-executable").write_text("")
    refused = through(launcher, staged, str(tmp_path / "not-executable"))
    assert (refused.returncode, refused.stderr) == (126, f"mokka: {tmp_path}/not-executable: Permission denied\n")


@pytest.mark.parametrize("args", [[], ["--", "true"], ["x", "--", "true"], ["/proc/a=b", "--", "true"],
                                  ["/proc/a=/b"], ["/proc/a=/b", "--"]])
def test_wrong_usage_is_refused(launcher: Path, args: list[str]) -> None:
    done = subprocess.run([str(launcher), *args], capture_output=True, text=True)
    assert done.returncode == 125 and done.stderr.startswith("mokka-proc-files: "), done.stderr
