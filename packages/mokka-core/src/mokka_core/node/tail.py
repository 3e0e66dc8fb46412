"""A log file read line by line from where the last read stopped, across rotations: standard library only.

The node daemon forwards its services' logs with it (``node.logstream``), and so does its lean
form at rest (``node.rest``), which runs on the standard library alone and hands each file over,
open at the first byte not forwarded yet, when it wakes the daemon again.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # not typing's: the lean form at rest imports nothing it can do without
if TYPE_CHECKING:
    from typing import IO


def prefixed(source: str, text: str) -> str:
    return "".join(f"[{source}] {line}\n" for line in text.splitlines())


class Tail:
    """A log file read from where the last read stopped, across supervisord's rotations."""

    def __init__(self, path: str | os.PathLike[str], fd: int | None = None) -> None:
        """``fd``: the file already open at the first byte not read yet (a handover, :meth:`detach`)."""
        self.path = path
        self.file: IO[bytes] | None = None
        self.inode: int | None = None
        self.partial = b""
        if fd is not None:
            os.set_inheritable(fd, False)
            self.file = open(fd, "rb")  # noqa: SIM115 - kept open between reads
            self.inode = os.fstat(fd).st_ino

    def read_lines(self, final: bool = False) -> list[str]:
        data = b""
        try:
            inode: int | None = os.stat(self.path).st_ino
        except OSError:
            inode = None
        if self.file is not None:
            if os.fstat(self.file.fileno()).st_size < self.file.tell():  # truncated: read it from the start
                self.file.seek(0)
            data += self.file.read()
            if inode != self.inode:  # rotated (or removed): the old file's rest is read, then the new one
                self.file.close()
                self.file = None
        if self.file is None and inode is not None:
            try:
                self.file = open(self.path, "rb")  # noqa: SIM115 - kept open between reads
                self.inode = os.fstat(self.file.fileno()).st_ino
                data += self.file.read()
            except OSError:
                pass
        *lines, self.partial = (self.partial + data).split(b"\n")
        if final and self.partial:
            lines, self.partial = [*lines, self.partial], b""
        return [line.decode(errors="replace") for line in lines]

    def detach(self) -> int | None:
        """The open file as an inheritable descriptor at the first byte of the line not read whole yet (None
        where none is open); this tail no longer reads."""
        if self.file is None:
            return None
        self.file.seek(self.file.tell() - len(self.partial))
        fd = os.dup(self.file.fileno())  # shares the offset; the file object closes its own
        os.set_inheritable(fd, True)
        self.partial = b""
        self.close()
        return fd

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
