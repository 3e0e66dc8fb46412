"""The node's kernel log written to the host's (``mokka node up --host-kmsg``): once, in order, off by default.

A regular file stands in for the host's /dev/kmsg: the test machine's kernel log is written only by the
one opt-in test (``MOKKA_TEST_REAL_KMSG=1``), with records that say they are a check, not an Xid.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from mokka_core.model.spec import NodeSpec
from mokka_core.node.supervise import read_pid
from mokka_core.stage.store import KERNEL_LOG, KERNEL_LOG_FORWARDED
from mokka_core.stage.surface import StageContext
from mokka_core.testing.tree import tree_snapshot
from mokka_core.testing.waiting import wait_for
from mokka_sim_gpu import kmsg_forward
from mokka_sim_gpu.kernel_log import LOADING_RECORDS, loading_messages
from mokka_sim_gpu.kmsg_forward import Forwarder, host_record, pending
from mokka_sim_gpu.surface import GpuSurface

#: a node's log starts with the driver's loading lines (``kernel_log.loading_messages``), never forwarded
LOADING = [f"4,{seq},0,-;{text}\n".encode() for seq, text in enumerate(loading_messages("550.163.01"), start=1)]
XID_79 = b"4,6,5000,-;NVRM: Xid (PCI:0000:1b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
OFF_BUS = b"4,7,5000,-;NVRM: GPU 0000:1b:00.0: GPU has fallen off the bus.\n"
XID_13 = b"4,8,7000,-;NVRM: Xid (PCI:0000:1b:00): 13, pid='<unknown>', name=<unknown>\n"


def test_a_record_is_written_as_the_kernel_takes_a_write_to_dev_kmsg() -> None:
    """Documentation/ABI/testing/dev-kmsg: a write is one record, ``<level>`` then the text."""
    assert host_record(XID_79) == (b"<4>NVRM: Xid (PCI:0000:1b:00): 79, pid='<unknown>', name=<unknown>, "
                                   b"GPU has fallen off the bus.\n")


def test_pending_goes_on_after_the_last_record_written() -> None:
    log = [*LOADING, XID_79, OFF_BUS, XID_13]
    assert len(LOADING) == LOADING_RECORDS
    assert pending(log, None) == [XID_79, OFF_BUS, XID_13]  # the host's log has its own boot
    assert pending(log, OFF_BUS) == [XID_13]
    assert pending(log, XID_13) == []
    # reset cleared the log, then a new Xid: numbered 1 again, stamped later than the last written
    renumbered = [b"4,6,9000,-;NVRM: Xid (PCI:0000:1b:00): 31, pid='<unknown>', name=<unknown>\n"]
    assert pending([*LOADING, *renumbered], XID_13) == renumbered
    assert pending([], XID_13) == []


def node_log(root: Path, *lines: bytes) -> None:
    (root / KERNEL_LOG).parent.mkdir(parents=True, exist_ok=True)
    (root / KERNEL_LOG).write_bytes(b"".join([*LOADING, *lines]))


def test_each_record_is_one_write_and_none_is_written_twice(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "host-kmsg"
    target.write_bytes(b"")
    node_log(tmp_path, XID_79, OFF_BUS)
    writes: list[bytes] = []
    real_write = os.write

    def spy(fd: int, data: bytes) -> int:
        writes.append(bytes(data))
        return real_write(fd, data)

    monkeypatch.setattr(kmsg_forward.os, "write", spy)
    forwarder = Forwarder(tmp_path, str(target))
    forwarder.step()
    forwarder.step()
    assert writes == [host_record(XID_79), host_record(OFF_BUS)]
    assert (tmp_path / KERNEL_LOG_FORWARDED).read_bytes() == OFF_BUS
    node_log(tmp_path, XID_79, OFF_BUS, XID_13)
    Forwarder(tmp_path, str(target)).step()  # a restarted service goes on after the last record written
    assert writes[2:] == [host_record(XID_13)]
    assert target.read_bytes() == b"".join(map(host_record, (XID_79, OFF_BUS, XID_13)))


def test_a_target_that_cannot_be_written_is_said_once_and_gets_its_records_later(tmp_path: Path, capsys) -> None:
    target = tmp_path / "host-kmsg"
    node_log(tmp_path, XID_79)
    forwarder = Forwarder(tmp_path, str(target))
    forwarder.start()
    forwarder.step()
    forwarder.step()
    out = capsys.readouterr().out
    assert out.count(f"mokka-kmsg: cannot write the host's kernel log {target} (No such file or directory)") == 1
    assert not target.exists()  # never created: a missing target is the host's, not ours to make
    target.write_bytes(b"")
    forwarder.step()
    assert target.read_bytes() == host_record(XID_79)
    assert f"{target} takes records again" in capsys.readouterr().out


def test_a_state_that_cannot_be_kept_does_not_repeat_a_record(tmp_path: Path, capsys) -> None:
    target = tmp_path / "host-kmsg"
    target.write_bytes(b"")
    node_log(tmp_path, XID_79, OFF_BUS)
    (tmp_path / KERNEL_LOG_FORWARDED).mkdir()  # the state's path taken: every save fails
    forwarder = Forwarder(tmp_path, str(target))
    forwarder.step()
    forwarder.step()
    assert target.read_bytes() == host_record(XID_79) + host_record(OFF_BUS)
    out = capsys.readouterr().out
    assert out.count(f"cannot keep the last record written in {tmp_path / KERNEL_LOG_FORWARDED}") == 1, out


@pytest.mark.skipif(os.environ.get("MOKKA_TEST_REAL_KMSG") != "1",
                    reason="writes to this machine's kernel log; opt in with MOKKA_TEST_REAL_KMSG=1 (root)")
def test_the_real_kernel_takes_each_record_as_written_past_its_rate_limit(tmp_path: Path) -> None:
    """12 records, more than the 10 the kernel takes from one open file in 5 s: each arrives, in order,
    with its level and facility user (``<4>`` reads back as priority 12 = 1 << 3 | 4)."""
    tag = uuid.uuid4().hex
    written = [f"4,{n},0,-;mokka-kmsg write check {tag} {n}, not an Xid\n".encode() for n in range(1, 13)]
    node_log(tmp_path, *written)
    Forwarder(tmp_path, "/dev/kmsg").step()
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
    (default,) = GpuSurface().services(node, StageContext(root=tmp_path))
    assert "--host-kmsg" not in default.command
    (asked,) = GpuSurface().services(node, StageContext(root=tmp_path, host_kmsg="/host/dev/kmsg"))
    assert asked.command[-2:] == ["--host-kmsg", "/host/dev/kmsg"]


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
        wait_for(lambda: target.read_bytes().count(b"\n") == 2, what="Xid 79 at the host's kernel log")
        first = target.read_text().splitlines()
        assert re.fullmatch(r"<4>NVRM: Xid \(PCI:0000:[0-9a-f]{2}:00\): 79, pid='<unknown>', name=<unknown>, "
                            r"GPU has fallen off the bus\.", first[0]), first
        assert re.fullmatch(r"<4>NVRM: GPU 0000:[0-9a-f]{2}:00\.0: GPU has fallen off the bus\.", first[1]), first
        supervisord = read_pid(root)
        daemon.kill()  # no teardown: the node's state, its log and the last record written stay
        daemon.communicate(timeout=30)
        assert supervisord is not None
        wait_for(lambda: not Path(f"/proc/{supervisord}").exists(), what="supervisord gone with its daemon")
        daemon = up(root, target)
        wait_for(lambda: ready(root), timeout=60, what="node ready again")
        ctl(root, "xid", "1", "13")
        wait_for(lambda: target.read_bytes().count(b"\n") == 3, what="Xid 13 at the host's kernel log")
        lines = target.read_text().splitlines()
        assert lines[:2] == first
        assert re.fullmatch(r"<4>NVRM: Xid \(PCI:0000:[0-9a-f]{2}:00\): 13, pid='<unknown>', name=<unknown>",
                            lines[2]), lines
    finally:
        daemon.send_signal(signal.SIGTERM)
        out, _ = daemon.communicate(timeout=60)
    assert daemon.returncode == 0, out
    assert tree_snapshot(root) == before, out  # the last record written goes with the node
    assert target.read_text().count("\n") == 3  # and the host's log keeps what it was given
