"""What a node is resolved from: the validated documents, where each came from, and their fingerprints."""

from __future__ import annotations

import os
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple

from .numa import HOST_CPUS_FILE, parse_cpulist

if TYPE_CHECKING:  # the snapshot imports this module for fingerprints: nvml-mock-ctl must not load pydantic
    from ..schema.overlays import Override, TopologyOverlay
    from ..schema.profile import Profile

#: (inode, size, mtime in ns) of a file, or None where there is no file
Fingerprint = list[int] | None


def fingerprint(path: str | os.PathLike[str]) -> Fingerprint:
    if str(path) == HOST_CPUS_FILE:
        return host_cpus_fingerprint()
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return [st.st_ino, st.st_size, st.st_mtime_ns]


def read_host_cpus() -> tuple[int, ...]:
    """The host's online CPUs (``HOST_CPUS_FILE``); OSError / ValueError name the file.

    Read at every change (a snapshot's freshness), so the list is parsed once per text."""
    fd = os.open(HOST_CPUS_FILE, os.O_RDONLY | os.O_CLOEXEC)
    try:
        text = os.read(fd, 1 << 16)
    finally:
        os.close(fd)
    found = _PARSED.get(text)
    if found is None:
        try:
            found = parse_cpulist(text.decode("ascii"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"{HOST_CPUS_FILE}: {exc}") from None
        if len(_PARSED) >= 16:
            _PARSED.clear()
        _PARSED[text] = found
    return found


_PARSED: dict[bytes, tuple[int, ...]] = {}


def host_cpus_fingerprint() -> Fingerprint:
    """The host's online CPUs themselves: sysfs gives no file a size or mtime that follows its content."""
    try:
        return list(read_host_cpus())
    except (OSError, ValueError):
        return None


class Inputs(NamedTuple):
    """Everything a node is resolved from, with where each part came from (for error messages)."""

    profile: Profile
    profile_source: str
    gpus: int | None = None
    node_name: str | None = None
    overlay: TopologyOverlay | None = None
    override: Override | None = None
    override_source: str = "override"
    surfaces: Mapping[str, Mapping[str, Any]] = MappingProxyType({})
    #: the override file's document as written (what ``override`` was validated from)
    override_doc: dict[str, Any] | None = None
    #: each input file's fingerprint, taken before it was read (see ``snapshot``); None when built in memory
    fingerprints: dict[str, Fingerprint] | None = None
    #: the host's online CPUs the node's CPU lists are folded onto (``model.numa``); None: the board's own
    host_cpus: tuple[int, ...] | None = None
