"""``/dev/kmsg`` of the node: the ``mokka-kmsg`` program serving the staged log one record per read (FUSE).

Each test runs the program as ``mokka run`` does, in a private mount namespace where the root's ``dev``
is ``/dev`` (with ``/dev/fuse`` bound into it), then a reader there.  What a reader sees is what the
kernel's /dev/kmsg does (Documentation/ABI/testing/dev-kmsg): one record per read(), EAGAIN at the end
for O_NONBLOCK, a wait for the next record without it, EINVAL for a buffer too small for the record.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from mokka_core.stage.store import KERNEL_LOG
from mokka_core.stage.surface import StageContext
from mokka_sim_gpu.kernel_log import READY, loading_messages
from mokka_sim_gpu.kmsg_service import kmsg_service

LOADING = [f"4,{seq},0,-;{text}\n" for seq, text in enumerate(loading_messages("550.163.01"), start=1)]
XID_13 = "4,6,7000,-;NVRM: Xid (PCI:0000:1b:00): 13, pid='<unknown>', name=<unknown>\n"
XID_31 = "4,7,9000,-;NVRM: Xid (PCI:0000:1b:00): 31, pid='<unknown>', name=<unknown>\n"

#: the root's dev shown at /dev, the service started there, the check run, then SIGTERM; then whether
#: anything is still mounted at /dev/kmsg and what the service said
NAMESPACE = """
for name in null zero urandom fuse; do : > {root}/dev/$name; mount --bind /dev/$name {root}/dev/$name; done
mount --rbind {root}/dev /dev
{service} > {root}/service.out 2>&1 &
service=$!
for i in $(seq 500); do [ -e {root}/{ready} ] && break; sleep 0.02; done
timeout 40 {check} || echo "check failed: $?"
kill -TERM $service; wait $service || echo "service exited $?"
echo "mounted=$(grep -c ' /dev/kmsg ' /proc/self/mountinfo || true)"
echo "marker=$(test -e {root}/{ready} && echo left || echo removed)"
cat {root}/service.out
"""

#: helpers every check has (a record read is one ``read(fd, size)``)
PRELUDE = """
import errno, json, os, sys, threading, time
def read(fd, size=8192):
    try:
        return os.read(fd, size).decode()
    except OSError as exc:
        return errno.errorcode[exc.errno]
def stage(text):  # as staging writes the log: a new file renamed over it
    tmp = LOG + ".tmp"
    with open(tmp, "w") as out:
        out.write(text)
    os.replace(tmp, LOG)
LOG = sys.argv[1]
"""


@pytest.fixture
def served(tmp_path: Path, in_namespace: Callable[[str], subprocess.CompletedProcess[str]]
           ) -> Callable[..., tuple[list[object], str]]:
    """Run ``check`` (Python, with :data:`PRELUDE`) beside the service on a root holding ``log``; what it
    printed (one JSON value a line) and everything else said."""

    def run(check: str, log: str, shell: str | None = None) -> tuple[list[object], str]:
        root = tmp_path / "root"
        (root / "dev").mkdir(parents=True)
        (root / KERNEL_LOG).parent.mkdir(parents=True)
        (root / KERNEL_LOG).write_text(log)
        (tmp_path / "check.py").write_text(PRELUDE + check)
        command = " ".join(kmsg_service(StageContext(root=root)).command)
        runs = shell or f"{sys.executable} {tmp_path / 'check.py'} {root / KERNEL_LOG}"
        try:
            done = in_namespace(NAMESPACE.format(root=root, ready=READY, service=command, check=runs))
        finally:  # a service that did not stop (its marker holds its pid) goes: readers it left waiting with it
            if (root / READY).exists():
                os.kill(int((root / READY).read_text()), signal.SIGKILL)
        assert done.returncode == 0, done.stdout + done.stderr
        lines = done.stdout.splitlines()
        assert "mounted=0" in lines and "marker=removed" in lines, done.stdout  # SIGTERM: unmounted, marker gone
        assert not any(line.startswith(("check failed", "service exited")) for line in lines), done.stdout
        values = [json.loads(line) for line in lines if line[:1] in '["{' or line[:1].isdigit()]
        return values, done.stdout

    return run


def test_each_read_is_one_record_and_a_nonblocking_reader_gets_eagain_at_the_end(served) -> None:
    check = """
fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
print(json.dumps([read(fd) for _ in range(8)]))
print(json.dumps(os.fstat(fd).st_size))
os.close(fd)
"""
    (reads, size), out = served(check, "".join(LOADING) + XID_13)
    assert reads == [*LOADING, XID_13, "EAGAIN", "EAGAIN"], out
    assert size == len("".join(LOADING) + XID_13)


def test_a_buffer_smaller_than_the_record_is_einval_and_the_record_stays(served) -> None:
    """As the kernel's devkmsg_read: a record never comes in parts."""
    check = """
fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
first = len(open(LOG).readline())
print(json.dumps([read(fd, 1), read(fd, first - 1), read(fd, first), read(fd, 16)]))
"""
    (reads,), out = served(check, "".join(LOADING))
    assert reads == ["EINVAL", "EINVAL", LOADING[0], "EINVAL"], out


def test_many_readers_each_read_the_whole_log_in_their_own_time(served) -> None:
    """Each open has its own place in the log; 40 readers waiting at once all get the next record."""
    check = """
fds = [os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK) for _ in range(40)]
got = [[] for _ in fds]
for turn in range(7):  # interleaved: reader n reads its next record on every turn from the n-th on
    for n, fd in enumerate(fds):
        if n % 7 <= turn:
            got[n].append(read(fd))
print(json.dumps(got))
waiting = [os.open("/dev/kmsg", os.O_RDONLY) for _ in range(40)]
woken = []
def wait(fd):
    for _ in range(5): read(fd)
    woken.append(read(fd))
threads = [threading.Thread(target=wait, args=(fd,)) for fd in waiting]
for thread in threads: thread.start()
time.sleep(0.5)  # all waiting for the next record
stage(open(LOG).read() + XID)
for thread in threads: thread.join(10)
print(json.dumps(woken))
""".replace("XID", repr(XID_13))
    (interleaved, woken), out = served(check, "".join(LOADING))
    for n, reads in enumerate(interleaved):
        assert reads == [*LOADING, "EAGAIN", "EAGAIN"][:7 - n % 7], (n, out)
    assert woken == [XID_13] * 40, out


def test_a_waiting_reader_gets_the_next_record_once_it_is_logged(served) -> None:
    check = """
fd = os.open("/dev/kmsg", os.O_RDONLY)
print(json.dumps([read(fd) for _ in LOADING_LINES]))
timer = threading.Timer(0.5, stage, [open(LOG).read() + XID])
started = time.monotonic()
timer.start()
print(json.dumps([read(fd), round(time.monotonic() - started, 1) >= 0.5]))
""".replace("LOADING_LINES", repr(LOADING)).replace("XID", repr(XID_13))
    (before, (waited, late)), out = served(check, "".join(LOADING))
    assert before == LOADING and waited == XID_13 and late, out


def test_a_signal_ends_a_waiting_read_with_eintr(served) -> None:
    """The kernel sends FUSE_INTERRUPT for a reader's signal; the waiting read is answered EINTR."""
    check = """
import signal
class Interrupted(Exception): pass
def alarm(*_): raise Interrupted
signal.signal(signal.SIGALRM, alarm)
fd = os.open("/dev/kmsg", os.O_RDONLY)
for _ in range(5): read(fd)
signal.setitimer(signal.ITIMER_REAL, 0.3)
try:
    print(json.dumps(read(fd)))
except Interrupted:
    print(json.dumps("interrupted"))
stage(open(LOG).read() + XID)
print(json.dumps(read(fd)))  # the reader goes on where it was
""".replace("XID", repr(XID_13))
    (first, then), out = served(check, "".join(LOADING))
    assert (first, then) == ("interrupted", XID_13), out


def test_a_rewritten_log_is_read_again(served) -> None:
    """Staging renames a new log over the old (nvml-mock-ctl xid, reset); one rewritten in place counts too."""
    check = """
fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
seen = [read(fd) for _ in range(7)]
stage(open(LOG).read() + XID_31)  # a new file
seen += [read(fd), read(fd)]
with open(LOG, "r+") as log:  # the same file, rewritten: the last record changed, same length
    text = log.read()
    log.seek(0)
    log.write(text.replace("Xid (PCI:0000:1b:00): 31", "Xid (PCI:0000:1b:00): 32"))
fresh = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
seen += [[read(fresh) for _ in range(8)][-2:], os.stat("/dev/kmsg").st_size]
stage("".join(LOADING_LINES))  # reset: the log cut back to the driver's loading lines
seen += [[read(fresh) for _ in range(1)], os.stat("/dev/kmsg").st_size]
print(json.dumps(seen))
""".replace("XID_31", repr(XID_31)).replace("LOADING_LINES", repr(LOADING))
    (seen,), out = served(check, "".join(LOADING) + XID_13)
    xid_32 = XID_31.replace(": 31,", ": 32,")
    assert seen[:9] == [*LOADING, XID_13, "EAGAIN", XID_31, "EAGAIN"], out
    assert seen[9:11] == [[xid_32, "EAGAIN"], len("".join(LOADING) + XID_13 + XID_31)], out
    assert seen[11:] == [["EAGAIN"], len("".join(LOADING))], out


def test_a_log_not_there_reads_as_empty_and_lines_are_records(served) -> None:
    """No log (yet, or gone): an empty /dev/kmsg, not an error; blank lines are no records, and a last line
    without its newline is a record with one, as ``kernel_log.kernel_log`` writes every record."""
    check = """
os.unlink(LOG)
fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
seen = [read(fd), os.fstat(fd).st_size]
stage("4,1,0,-;first\\n\\n\\n4,2,0,-;second")
seen += [read(fd), read(fd), read(fd), os.fstat(fd).st_size]
print(json.dumps(seen))
"""
    (seen,), out = served(check, "".join(LOADING))
    records = ["4,1,0,-;first\n", "4,2,0,-;second\n"]
    assert seen == ["EAGAIN", 0, *records, "EAGAIN", len("".join(records))], out


def test_util_linux_dmesg_reads_the_log_and_follows_it(served) -> None:
    """dmesg reads /dev/kmsg with O_NONBLOCK to its end; ``dmesg -w`` then waits in read() for the next."""
    check = f"""
import subprocess
print(json.dumps(subprocess.run(["dmesg"], capture_output=True, text=True).stdout.splitlines()))
follow = subprocess.Popen(["dmesg", "-w"], stdout=subprocess.PIPE, text=True)
lines = [follow.stdout.readline() for _ in range(5)]
stage(open(LOG).read() + {XID_13!r})
lines.append(follow.stdout.readline())
follow.terminate()
print(json.dumps([lines[-1], follow.wait(timeout=10)]))
"""
    (once, (followed, status)), out = served(check, "".join(LOADING))
    assert [line.split("] ", 1)[1] for line in once] == [record.split(";", 1)[1].rstrip() for record in LOADING]
    assert once[0].startswith("[    0.000000] "), out
    assert followed.startswith("[    0.007000] NVRM: Xid (PCI:0000:1b:00): 13, pid='<unknown>'"), out
    assert status == -15, out


def test_it_idles_where_the_root_is_not_shown_at_the_real_paths(
        tmp_path: Path, in_namespace: Callable[[str], subprocess.CompletedProcess[str]]) -> None:
    """``mokka node up --root DIR`` (DIR not at the real paths) and a root that is / itself: /dev/kmsg is left
    alone, the host's own kernel log above all."""
    for root, shown in ((tmp_path / "root", tmp_path / "root"), (tmp_path / "slash", Path("/"))):
        if root.name == "slash":
            root.symlink_to("/")
        else:
            (root / "dev").mkdir(parents=True)
        command = " ".join(kmsg_service(StageContext(root=root)).command)
        # a private /var/lib: the marker of a root that is / lands there, not on this machine
        script = (f"mount -t tmpfs none /var/lib; {command} & service=$!; "
                  f"for i in $(seq 500); do [ -e {root}/{READY} ] && break; sleep 0.02; done; "
                  "echo mounted=$(grep -c ' /dev/kmsg ' /proc/self/mountinfo || true); "
                  "kill -TERM $service; wait $service")
        done = in_namespace(script)
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"mokka-kmsg: {root} is not shown at the real paths here; the kernel log stays at {root / KERNEL_LOG}" \
            in done.stdout, done.stdout
        assert "mounted=0" in done.stdout, done.stdout
        assert not os.path.lexists(shown / "dev/kmsg") or shown == Path("/")


def test_a_node_without_the_built_program_says_how_to_build_it(tmp_path: Path, native_dir: Path) -> None:
    """``native_dir``: a built library and nothing else, as before ``make -C native install`` built the service."""
    from mokka_sim_gpu.library import ServiceNotBuilt

    with pytest.raises(ServiceNotBuilt, match=r"gpu: the mokka-kmsg service is not built .*`make -C native install`"):
        kmsg_service(StageContext(root=tmp_path, native_dir=native_dir))
