"""The node's kernel log written to the host's (``mokka node up --host-kmsg``): once, in order, off by default.

The ``mokka-kmsg`` program runs on a root that is not shown at the real paths, so it only forwards.  A
regular file stands in for the host's /dev/kmsg: the test machine's kernel log is written only by the
one opt-in test (``MOKKA_TEST_REAL_KMSG=1``), with records that say they are a check, not an Xid.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from mokka_core.model.spec import NodeSpec
from mokka_core.node.supervise import read_pid
from mokka_core.stage.store import KERNEL_LOG, KERNEL_LOG_FORWARDED
from mokka_core.stage.surface import StageContext
from mokka_core.testing.tree import tree_snapshot
from mokka_core.testing.waiting import wait_for
from mokka_sim_gpu.kernel_log import LOADING_RECORDS, READY, loading_messages
from mokka_sim_gpu.kmsg_service import kmsg_service
from mokka_sim_gpu.surface import GpuSurface

#: a node's log starts with the driver's loading lines (``kernel_log.loading_messages``), never forwarded
LOADING = [f"4,{seq},0,-;{text}\n".encode() for seq, text in enumerate(loading_messages("550.163.01"), start=1)]
XID_79 = b"4,6,5000,-;NVRM: Xid (PCI:0000:1b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
OFF_BUS = b"4,7,5000,-;NVRM: GPU 0000:1b:00.0: GPU has fallen off the bus.\n"
XID_13 = b"4,8,7000,-;NVRM: Xid (PCI:0000:1b:00): 13, pid='<unknown>', name=<unknown>\n"
#: how often the service looks for new records (``FORWARD_POLL_MS`` in native/kmsg/main.c), with a margin
STEP_SECONDS = 1.3


def host_record(record: bytes) -> bytes:
    """What the kernel takes as one write to /dev/kmsg (Documentation/ABI/testing/dev-kmsg): ``<level>text``."""
    fields, _, text = record.partition(b";")
    return b"<" + fields.split(b",", 1)[0] + b">" + text


def node_log(root: Path, *lines: bytes) -> None:
    (root / KERNEL_LOG).parent.mkdir(parents=True, exist_ok=True)
    (root / KERNEL_LOG).write_bytes(b"".join([*LOADING, *lines]))


def serve(root: Path, target: Path | str, steps: int = 0, prefix: tuple[str, ...] = ()) -> str:
    """Run the service on ``root`` until it is ready (it has written what the log held), ``steps`` more looks at
    the log, then SIGTERM; what it said.  ``prefix``: a program it runs under (strace)."""
    command = kmsg_service(StageContext(root=root, host_kmsg=str(target))).command
    service = subprocess.Popen([*prefix, *command], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
    try:
        wait_for(lambda: (root / READY).exists() or service.poll() is not None, what="mokka-kmsg ready")
        time.sleep(steps * STEP_SECONDS)
        os.kill(int((root / READY).read_text()), signal.SIGTERM)  # its marker holds its pid (strace's child)
        out, _ = service.communicate(timeout=30)
    finally:
        if service.poll() is None:  # it never got ready, or did not stop: nothing of it outlives the test
            os.killpg(service.pid, signal.SIGKILL)
            service.communicate()
    assert service.returncode == 0, out
    assert not (root / READY).exists(), out  # its marker goes with it
    return out


def test_a_record_is_written_as_the_kernel_takes_a_write_to_dev_kmsg(tmp_path: Path) -> None:
    """Documentation/ABI/testing/dev-kmsg: a write is one record, ``<level>`` then the text."""
    target = tmp_path / "host-kmsg"
    target.write_bytes(b"")
    node_log(tmp_path, XID_79)
    serve(tmp_path, target)
    assert target.read_bytes() == (b"<4>NVRM: Xid (PCI:0000:1b:00): 79, pid='<unknown>', name=<unknown>, "
                                   b"GPU has fallen off the bus.\n")


@pytest.mark.parametrize(("log", "last", "written"), [
    ([XID_79, OFF_BUS, XID_13], None, [XID_79, OFF_BUS, XID_13]),  # the host's log has its own boot
    ([XID_79, OFF_BUS, XID_13], OFF_BUS, [XID_13]),
    ([XID_79, OFF_BUS, XID_13], XID_13, []),
    # reset cleared the log, then a new Xid: numbered 6 again, stamped later than the last written
    ([b"4,6,9000,-;NVRM: Xid (PCI:0000:1b:00): 31, pid='<unknown>', name=<unknown>\n"], XID_13,
     [b"4,6,9000,-;NVRM: Xid (PCI:0000:1b:00): 31, pid='<unknown>', name=<unknown>\n"]),
    ([], XID_13, []),
], ids=["first-start", "after-the-last", "nothing-new", "renumbered", "cut"])
def test_it_goes_on_after_the_last_record_written(tmp_path: Path, log: list[bytes], last: bytes | None,
                                                  written: list[bytes]) -> None:
    assert len(LOADING) == LOADING_RECORDS
    target = tmp_path / "host-kmsg"
    target.write_bytes(b"")
    node_log(tmp_path, *log)
    if last is not None:
        (tmp_path / KERNEL_LOG_FORWARDED).write_bytes(last)
    serve(tmp_path, target)
    assert target.read_bytes() == b"".join(map(host_record, written))
    assert (tmp_path / KERNEL_LOG_FORWARDED).read_bytes() == (written[-1] if written else last)


def test_each_record_is_one_write_and_none_is_written_twice(tmp_path: Path) -> None:
    from mokka_core.testing.consumers import apt_tool

    strace = apt_tool("strace", "strace")
    trace = tmp_path / "trace"
    target = tmp_path / "host-kmsg"
    target.write_bytes(b"")
    node_log(tmp_path, XID_79, OFF_BUS)
    serve(tmp_path, target, steps=1, prefix=(str(strace), "-qq", "-e", "trace=write", "-e", "signal=none",
                                            "-xx", "-s", "512", "-o", str(trace)))
    writes = [bytes.fromhex(data.replace("\\x", "")) for data in
              re.findall(r'^write\(\d+, "((?:\\x[0-9a-f]{2})*)"', trace.read_text(), re.MULTILINE)]
    assert [w for w in writes if w.startswith(b"<")] == [host_record(XID_79), host_record(OFF_BUS)], writes
    assert (tmp_path / KERNEL_LOG_FORWARDED).read_bytes() == OFF_BUS
    node_log(tmp_path, XID_79, OFF_BUS, XID_13)
    serve(tmp_path, target)  # a restarted service goes on after the last record written
    assert target.read_bytes() == b"".join(map(host_record, (XID_79, OFF_BUS, XID_13)))


def test_a_target_that_cannot_be_written_is_said_once_and_gets_its_records_later(tmp_path: Path) -> None:
    target = tmp_path / "host-kmsg"
    node_log(tmp_path, XID_79)
    command = kmsg_service(StageContext(root=tmp_path, host_kmsg=str(target))).command
    service = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: (tmp_path / READY).exists() or service.poll() is not None, what="mokka-kmsg ready")
        time.sleep(STEP_SECONDS)  # one more look at the log, the target still missing
        assert not target.exists()  # never created: a missing target is the host's, not ours to make
        target.write_bytes(b"")
        wait_for(lambda: target.read_bytes() == host_record(XID_79), what="the record written once it can be")
    finally:
        service.send_signal(signal.SIGTERM)
        out, _ = service.communicate(timeout=30)
    assert out.count(f"mokka-kmsg: cannot write the host's kernel log {target} (No such file or directory)") == 1, out
    assert f"{target} takes records again" in out


def test_a_state_that_cannot_be_kept_does_not_repeat_a_record(tmp_path: Path) -> None:
    target = tmp_path / "host-kmsg"
    target.write_bytes(b"")
    node_log(tmp_path, XID_79, OFF_BUS)
    (tmp_path / KERNEL_LOG_FORWARDED).mkdir()  # the state's path taken: every save fails
    out = serve(tmp_path, target, steps=1)
    assert target.read_bytes() == host_record(XID_79) + host_record(OFF_BUS)
    assert out.count(f"cannot keep the last record written in {tmp_path / KERNEL_LOG_FORWARDED}") == 1, out


@pytest.mark.skipif(os.environ.get("MOKKA_TEST_REAL_KMSG") != "1",
                    reason="writes to this machine's kernel log; opt in with MOKKA_TEST_REAL_KMSG=1 (root)")
def test_the_real_kernel_takes_each_record_as_written_past_its_rate_limit(tmp_path: Path) -> None:
    """12 records, more than the 10 the kernel takes from one open file in 5 s: each arrives, in order,
    with its level and facility user (``<4>`` reads back as priority 12 = 1 << 3 | 4)."""
    tag = uuid.uuid4().hex
    written = [f"4,{n},0,-;mokka-kmsg write check {tag} {n}, not an Xid\n".encode() for n in range(1, 13)]
    node_log(tmp_path, *written)
    serve(tmp_path, "/dev/kmsg")
    reader = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    found: list[bytes] = []
    try:
        while True:
            try:
                record = os.read(reader, 8192)
            except BlockingIOError:
                break
            except BrokenPipeError:  # records overwritten while reading: go on with the next
                continue
            if tag.encode() in record:
                found.append(record)
    finally:
        os.close(reader)
    assert [r.split(b";", 1)[1] for r in found] == [r.split(b";", 1)[1] for r in written]
    assert {r.split(b",", 1)[0] for r in found} == {b"12"}


def test_the_service_writes_to_the_host_only_when_asked(tmp_path: Path) -> None:
    node = NodeSpec(profile="h100", gpus=1).resolve()
    def kmsg(ctx: StageContext) -> list[str]:
        (service,) = [service for service in GpuSurface().services(node, ctx) if service.name == "mokka-kmsg"]
        return service.command

    assert "--host-kmsg" not in kmsg(StageContext(root=tmp_path))
    assert kmsg(StageContext(root=tmp_path, host_kmsg="/host/dev/kmsg"))[-2:] == ["--host-kmsg", "/host/dev/kmsg"]


def up(root: Path, target: Path) -> subprocess.Popen[str]:
    mokka = Path(sys.executable).with_name("mokka")
    return subprocess.Popen([str(mokka), "node", "up", "--profile", "h100", "--gpus", "2", "--surfaces", "gpu,pci",
                             "--root", str(root), "--host-kmsg", str(target)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def ctl(root: Path, *args: str) -> None:
    ctl = Path(sys.executable).with_name("nvml-mock-ctl")
    subprocess.run([str(ctl), "--root", str(root), *args], check=True, capture_output=True, timeout=60)


def ready(root: Path) -> bool:
    mokka = Path(sys.executable).with_name("mokka")
    done = subprocess.run([str(mokka), "node", "status", "--root", str(root), "--ready"], capture_output=True)
    return done.returncode == 0 and (root / "var/lib/mokka/run/kmsg.ready").exists()


@pytest.mark.e2e
def test_an_xid_reaches_the_hosts_kernel_log_once_across_a_daemon_restart(tmp_path: Path) -> None:
    root, target = tmp_path / "root", tmp_path / "host-kmsg"
    root.mkdir()
    target.write_bytes(b"")
    before = tree_snapshot(root)
    daemon = up(root, target)
    try:
        wait_for(lambda: ready(root), timeout=60, what="node ready")
        assert target.read_bytes() == b""  # a node without Xids writes nothing
        ctl(root, "xid", "0", "79")
        wait_for(lambda: target.read_bytes().count(b"\n") == 5, what="Xid 79 at the host's kernel log")
        first = target.read_text().splitlines()
        assert re.fullmatch(r"<4>NVRM: Xid \(PCI:0000:[0-9a-f]{2}:00\): 79, pid='<unknown>', name=<unknown>, "
                            r"GPU has fallen off the bus\.", first[0]), first
        assert re.fullmatch(r"<4>NVRM: GPU 0000:[0-9a-f]{2}:00\.0: GPU has fallen off the bus\.", first[1]), first
        # one record of three lines, written with its line breaks as the driver printed it (no \x0a escapes)
        assert re.fullmatch(r"<4>NVRM: The NVIDIA GPU 0000:[0-9a-f]{2}:00\.0", first[2]), first
        assert first[3:] == ["NVRM: (PCI ID: 10de:2330) installed in this system has",
                             "NVRM: fallen off the bus and is not responding to commands."], first
        supervisord = read_pid(root)
        daemon.kill()  # no teardown: the node's state, its log and the last record written stay
        daemon.communicate(timeout=30)
        assert supervisord is not None
        wait_for(lambda: not Path(f"/proc/{supervisord}").exists(), what="supervisord gone with its daemon")
        daemon = up(root, target)
        wait_for(lambda: ready(root), timeout=60, what="node ready again")
        ctl(root, "xid", "1", "13")
        wait_for(lambda: target.read_bytes().count(b"\n") == 6, what="Xid 13 at the host's kernel log")
        lines = target.read_text().splitlines()
        assert lines[:5] == first
        assert re.fullmatch(r"<4>NVRM: Xid \(PCI:0000:[0-9a-f]{2}:00\): 13, pid='<unknown>', name=<unknown>, "
                            r"Graphics SM Warp Exception on \(GPC 1, TPC 3, SM 0\): Out Of Range Address",
                            lines[5]), lines
    finally:
        daemon.send_signal(signal.SIGTERM)
        out, _ = daemon.communicate(timeout=60)
    assert daemon.returncode == 0, out
    assert tree_snapshot(root) == before, out  # the last record written goes with the node
    assert target.read_text().count("\n") == 6  # and the host's log keeps what it was given
