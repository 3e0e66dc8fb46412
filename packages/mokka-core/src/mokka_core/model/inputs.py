"""What a node is resolved from: the validated documents, where each came from, and their fingerprints."""

from __future__ import annotations

import os
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:  # the snapshot imports this module for fingerprints: nvml-mock-ctl must not load pydantic
    from ..schema.overlays import Override, TopologyOverlay
    from ..schema.profile import Profile

#: (inode, size, mtime in ns) of a file, or None where there is no file
Fingerprint = list[int] | None


def fingerprint(path: str | os.PathLike[str]) -> Fingerprint:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return [st.st_ino, st.st_size, st.st_mtime_ns]


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
