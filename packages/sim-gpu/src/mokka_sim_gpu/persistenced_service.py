"""The ``mokka-persistenced`` service: the node's NVML state for GPU containers, at nvidia-persistenced's socket.

A container the NVIDIA container toolkit makes gets the driver's files one by one (the library, nvidia-smi, the
device nodes) and the IPC sockets of the driver root (``run/nvidia-persistenced/socket``), never the state file
beside the library.  The library there connects to that socket, and this small C program (``native/persistenced``,
installed beside the mock library) passes it read-only descriptors of the state file and the setter record, and
new ones whenever either is replaced (native/README.md, "The state feed").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mokka_core.errors import MokkaError
from mokka_core.stage.native import native_library
from mokka_core.stage.paths import NVML_SETTINGS_FILE, NVML_STATE_FILE, PERSISTENCED_SOCKET
from mokka_core.stage.surface import Entry, Runtime, Service

if TYPE_CHECKING:
    from mokka_core.stage.surface import StageContext

PROGRAM = "mokka-persistenced"


class PersistencedNotBuilt(MokkaError):
    """No built mokka-persistenced program to run."""


def persistenced_service(ctx: StageContext) -> Service:
    program = native_library(PROGRAM, ctx.native_dir)
    if program is None:
        raise PersistencedNotBuilt(f"gpu: the {PROGRAM} service is not built (no {PROGRAM} in mokka_core/_native or "
                                   "$MOKKA_NATIVE_DIR); run `make -C native install` first")
    command = [str(program), "--root", str(ctx.root), "--state", NVML_STATE_FILE, "--settings", NVML_SETTINGS_FILE,
               "--socket", PERSISTENCED_SOCKET]
    return Service(name=PROGRAM, command=command, ready_path=PERSISTENCED_SOCKET)


def socket_entries() -> list[Entry]:
    """The socket the service binds: the surface's, so that teardown removes one a killed service left."""
    return [Runtime(PERSISTENCED_SOCKET)]
