"""Reading an input file whole, with a bound: never a stat and then a read that trusts it.

A device (/dev/zero), a FIFO or a symlink to one is refused at once, and a file that grows past the
bound is cut off at ``limit + 1`` bytes, so memory stays bounded and nothing blocks.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..errors import ConfigError


def read_bounded(path: Path, limit: int) -> bytes:
    """The whole regular file ``path`` (a symlink followed), at most ``limit`` bytes.

    A missing file raises FileNotFoundError (the caller decides what that means); anything else
    that cannot be read whole is a ConfigError naming the file.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise ConfigError(str(path), [("", f"cannot read file: {exc.strerror}")]) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise ConfigError(str(path), [("", f"not a regular file (a {_kind(mode)})")])
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise ConfigError(str(path), [("", f"cannot read file: {exc.strerror}")]) from None
    finally:
        os.close(fd)
    if size > limit:
        raise ConfigError(str(path), [("", f"file is larger than {limit} bytes")])
    return b"".join(chunks)


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    if stat.S_ISDIR(mode):
        return "directory"
    return "socket" if stat.S_ISSOCK(mode) else "special file"
