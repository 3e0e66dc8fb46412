"""Which node this process's NVML answers for (``Node.activate``).

The mock library is loaded once per process and fixes where its state file is at first use:
beside itself, as the loader names it.  So it is loaded from a directory of this process's own
(``libnvidia-ml.so.1`` there links to the node's library) whose ``mokka-nvml.state`` links to the
active node's state file; activating another node later re-points the link, and the library
sees the new file at its next check.  The directory exists only while a node is active.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from ..errors import MokkaError

LIBRARY = "libnvidia-ml.so.1"
STATE = "mokka-nvml.state"

_active: Any = None
_directory: Path | None = None  # chosen once: the loaded library looks for its state here for good
_loaded: ctypes.CDLL | None = None  # the library this process loaded, once


def activate(node: object, library: Path, state: Path) -> None:
    global _active, _directory, _loaded
    if _active is node:
        return
    if _active is not None:
        raise MokkaError("another node is active in this process: one node's NVML at a time "
                         "(close it first; use node.env to show other nodes to subprocesses)")
    if _loaded is None:
        _check_nothing_loaded()
    elif not library.exists():
        raise MokkaError("this node has no NVML library (its gpu surface is disabled), and this process has "
                         "already loaded one: pynvml would go on answering for the last node; show it to a "
                         "subprocess through node.env instead")
    if _directory is None:
        _directory = Path(tempfile.mkdtemp(prefix="mokka-nvml-"))
    else:
        _directory.mkdir(mode=0o700, exist_ok=True)
    if library.exists():
        (_directory / LIBRARY).symlink_to(library.resolve())
    (_directory / STATE).symlink_to(state.absolute())
    _active = node
    if _loaded is None and library.exists():
        _loaded = ctypes.CDLL(str(_directory / LIBRARY), mode=ctypes.RTLD_GLOBAL)  # pynvml's CDLL(soname) finds it


def refresh(node: object) -> None:
    """After a change of the active ``node``: have this process's NVML read its state now, not at its next
    check (every few ms).  Creating an event set does that (an event set starts from the state now); the
    library answers UNINITIALIZED while nothing in this process has initialised it, and then nothing reads."""
    if _active is not node or _loaded is None:
        return
    events = ctypes.c_void_p()
    if _loaded.nvmlEventSetCreate(ctypes.byref(events)) == 0:
        _loaded.nvmlEventSetFree(events)


def release(node: object) -> None:
    """The node is closing: no node is active any more (the library keeps its last snapshot)."""
    global _active
    if _active is node and _directory is not None:
        shutil.rmtree(_directory, ignore_errors=True)
        _active = None


def _check_nothing_loaded() -> None:
    if os.environ.get("MOKKA_NVML_STATE"):
        raise MokkaError("$MOKKA_NVML_STATE is set: the NVML library would read that file, not the node's "
                         "(unset it to activate a node)")
    pynvml = sys.modules.get("pynvml")
    if pynvml is not None and getattr(pynvml, "nvmlLib", None) is not None:
        raise MokkaError("pynvml has already loaded an NVML library in this process: activate the node before "
                         "the first pynvml.nvmlInit()")
    with open("/proc/self/maps") as maps:
        loaded = next((line.split()[-1] for line in maps if "libnvidia-ml.so" in line), None)
    if loaded is not None:
        raise MokkaError(f"this process has already loaded {loaded}: activate the node before anything loads NVML")
