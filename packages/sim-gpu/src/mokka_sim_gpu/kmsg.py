"""``/dev/kmsg`` of the node: the staged kernel log served one record per read(), as the kernel does.

Readers of /dev/kmsg (util-linux dmesg, node-problem-detector, NVSentinel) parse one record
per read() call, so a plain file shows them its first record only.  This service mounts a
FUSE file (``/dev/fuse``, the kernel's protocol spoken directly, no libfuse) over
/dev/kmsg and answers each read with the next record of the staged log
(:data:`~mokka_core.stage.store.KERNEL_LOG`), re-read whenever it changed, so Xids raised
while no reader runs are there for the next one.  A reader that opened without O_NONBLOCK
waits for the next record, as on a real kernel; one with it gets EAGAIN at the end.

It serves only where the root is shown at the real paths (inside ``mokka run``, where
/dev is the root's); elsewhere (``mokka node up --root DIR``) it idles, and on the host
itself (root /) it never covers the host's own kernel log.  With ``--host-kmsg`` it also
writes the node's records to the host's kernel log (:mod:`.kmsg_forward`), wherever the root is.
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import os
import select
import stat
import struct
import threading
from pathlib import Path

from mokka_core.node.foreground import foreground
from mokka_core.stage.store import KERNEL_LOG, atomic_write

from .kernel_log import READY, LogFile
from .kmsg_forward import Forwarder

PROGRAM = "mokka-kmsg"
IN_HEADER = struct.Struct("<IIQQIIII")
OUT_HEADER = struct.Struct("<IiQ")
FUSE_GETATTR, FUSE_OPEN, FUSE_READ, FUSE_RELEASE, FUSE_FLUSH = 3, 14, 15, 18, 25
FUSE_INIT, FUSE_FORGET, FUSE_INTERRUPT, FUSE_DESTROY, FUSE_BATCH_FORGET = 26, 2, 36, 38, 42
FOPEN_DIRECT_IO = 1  # every read() reaches us: one record each
MS_NOSUID, MS_NODEV = 0x2, 0x4
POLL_SECONDS = 0.2


class Reader:  # plain classes, not dataclasses: a service that runs on every node does not load inspect
    __slots__ = ("next_record", "nonblocking")

    def __init__(self, nonblocking: bool) -> None:
        self.nonblocking = nonblocking
        self.next_record = 0


class Server:
    def __init__(self, fuse: int, log: Path) -> None:
        self.fuse = fuse
        self.log = LogFile(log)
        self.readers: dict[int, Reader] = {}
        self.parked: dict[int, tuple[int, int]] = {}  # unique -> (fh, size): waiting readers
        self._next_fh = 1

    def current(self) -> list[bytes]:
        return self.log.records()

    def reply(self, unique: int, payload: bytes = b"", error: int = 0) -> None:
        try:
            os.write(self.fuse, OUT_HEADER.pack(OUT_HEADER.size + len(payload), -error, unique) + payload)
        except OSError as exc:  # ENOENT: the request was interrupted meanwhile
            if exc.errno != errno.ENOENT:
                raise

    def handle(self, request: bytes) -> bool:
        """Answer one request; False once the kernel says the mount is gone."""
        _, opcode, unique, _, _uid, _gid, _, _ = IN_HEADER.unpack_from(request)
        body = request[IN_HEADER.size:]
        if opcode == FUSE_INIT:
            _major, minor, readahead, _ = struct.unpack_from("<IIII", body)
            self.reply(unique, struct.pack("<IIIIHHIIHHI7I", 7, min(minor, 31), readahead, 0, 16, 12, 4096, 1,
                                           0, 0, 0, *([0] * 7)))
        elif opcode == FUSE_GETATTR:
            size = sum(map(len, self.current()))
            attr = struct.pack("<QQQQQQIIIIIIIIII", 1, size, 0, 0, 0, 0, 0, 0, 0, stat.S_IFREG | 0o644, 1,
                               0, 0, 0, 4096, 0)
            self.reply(unique, struct.pack("<QII", 0, 0, 0) + attr)
        elif opcode == FUSE_OPEN:
            (flags,) = struct.unpack_from("<I", body)
            fh, self._next_fh = self._next_fh, self._next_fh + 1
            self.readers[fh] = Reader(nonblocking=bool(flags & os.O_NONBLOCK))
            self.reply(unique, struct.pack("<QII", fh, FOPEN_DIRECT_IO, 0))
        elif opcode == FUSE_READ:
            fh, _, size = struct.unpack_from("<QQI", body)
            self.read(unique, fh, size)
        elif opcode == FUSE_INTERRUPT:
            (interrupted,) = struct.unpack_from("<Q", body)
            if self.parked.pop(interrupted, None) is not None:
                self.reply(interrupted, error=errno.EINTR)
        elif opcode == FUSE_RELEASE:
            (fh,) = struct.unpack_from("<Q", body)
            self.readers.pop(fh, None)
            self.parked = {u: p for u, p in self.parked.items() if p[0] != fh}
            self.reply(unique)
        elif opcode == FUSE_FLUSH:
            self.reply(unique)
        elif opcode == FUSE_DESTROY:
            self.reply(unique)
            return False
        elif opcode not in (FUSE_FORGET, FUSE_BATCH_FORGET):  # those take no answer
            self.reply(unique, error=errno.ENOSYS)
        return True

    def read(self, unique: int, fh: int, size: int) -> None:
        reader = self.readers.get(fh)
        if reader is None:
            self.reply(unique, error=errno.EBADF)
            return
        log = self.current()
        if reader.next_record < len(log):
            record = log[reader.next_record]
            if len(record) > size:
                self.reply(unique, error=errno.EINVAL)  # as the kernel: the buffer must hold a record
                return
            reader.next_record += 1
            self.reply(unique, record)
        elif reader.nonblocking:
            self.reply(unique, error=errno.EAGAIN)
        else:
            self.parked[unique] = (fh, size)

    def wake_parked(self) -> None:
        for unique, (fh, size) in list(self.parked.items()):
            reader = self.readers.get(fh)
            if reader is not None and reader.next_record < len(self.current()):
                del self.parked[unique]
                self.read(unique, fh, size)

    def serve(self, stop: threading.Event) -> None:
        while not stop.is_set():
            ready, _, _ = select.select([self.fuse], [], [], POLL_SECONDS)
            if ready:
                try:
                    request = os.read(self.fuse, 1 << 17)
                except OSError as exc:
                    if exc.errno in (errno.ENODEV, errno.EBADF):
                        return  # unmounted
                    if exc.errno in (errno.EINTR, errno.EAGAIN, errno.ENOENT):
                        continue
                    raise
                if not self.handle(request):
                    return
            self.wake_parked()


def shown_at_real_paths(root: Path) -> bool:
    """Whether this process sees ``root`` at the real paths: its /dev is the root's, and the root is not /."""
    try:
        return root.resolve() != Path("/") and os.path.samefile(root / "dev", "/dev")
    except OSError:
        return False


def mount_fuse_file(target: str) -> int:
    fuse = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
    if not os.path.lexists(target):
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))
    libc = ctypes.CDLL(None, use_errno=True)
    options = f"fd={fuse},rootmode={stat.S_IFREG | 0o644:o},user_id={os.getuid()},group_id={os.getgid()},allow_other"
    if libc.mount(b"mokka-kmsg", target.encode(), b"fuse", MS_NOSUID | MS_NODEV, options.encode()) != 0:
        err = ctypes.get_errno()
        os.close(fuse)
        raise OSError(err, f"mount fuse on {target}: {os.strerror(err)}")
    return fuse


def run(root: Path, stop: threading.Event, ready: threading.Event, host_kmsg: str | None = None) -> None:
    marker = root / READY
    if not shown_at_real_paths(root):
        print(f"{PROGRAM}: {root} is not shown at the real paths here; the kernel log stays at {root / KERNEL_LOG}")
    else:
        try:
            fuse = mount_fuse_file("/dev/kmsg")
        except OSError as exc:
            print(f"{PROGRAM}: cannot serve /dev/kmsg ({exc.strerror}); it reads as a plain file of the log")
        else:
            server = Server(fuse, root / KERNEL_LOG)
            thread = threading.Thread(target=server.serve, args=(stop,), name="kmsg", daemon=True)
            thread.start()
    if host_kmsg is not None:
        forwarder = Forwarder(root, host_kmsg)
        forwarder.start()
        threading.Thread(target=forwarder.serve, args=(stop,), name="kmsg-forward", daemon=True).start()
    marker.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(marker, f"{os.getpid()}\n")
    ready.set()
    try:
        stop.wait()
    finally:
        marker.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=PROGRAM, description="Serve the node's kernel log at /dev/kmsg.")
    parser.add_argument("--root", type=Path, required=True, help="the staged root")
    parser.add_argument("--host-kmsg", metavar="PATH",
                        help="also write each record of the node's kernel log, once, to this kernel log of the host")
    args = parser.parse_args(argv)
    raise SystemExit(foreground(PROGRAM, lambda stop, ready: run(args.root, stop, ready, args.host_kmsg)))


if __name__ == "__main__":
    main()
