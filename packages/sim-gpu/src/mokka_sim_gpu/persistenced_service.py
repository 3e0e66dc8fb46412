"""The ``mokka-persistenced`` service: the node's NVML state for GPU containers, at nvidia-persistenced's socket.

A container the NVIDIA container toolkit makes gets the driver's files one by one (the library, nvidia-smi, the
device nodes) and the IPC sockets of the driver root (``run/nvidia-persistenced/socket``), never the state file
beside the library.  The library there connects to that socket, and this small C program (``native/persistenced``,
installed beside the mock library) passes it read-only descriptors of the state file and the setter record, and
new ones whenever either is replaced (native/README.md, "The state feed").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mokka_core.stage.paths import NVML_SETTINGS_FILE, NVML_STATE_FILE, PERSISTENCED_SOCKET
from mokka_core.stage.surface import Entry, Runtime, Service

from .library import service_program

if TYPE_CHECKING:
    from mokka_core.stage.surface import StageContext

PROGRAM = "mokka-persistenced"



def persistenced_service(ctx: StageContext) -> Service:
    program = service_program(PROGRAM, ctx)
    command = [str(program), "--root", str(ctx.root), "--state", NVML_STATE_FILE, "--settings", NVML_SETTINGS_FILE,
               "--socket", PERSISTENCED_SOCKET]
    return Service(name=PROGRAM, command=command, ready_path=PERSISTENCED_SOCKET)


def socket_entries() -> list[Entry]:
    """The socket the service binds: the surface's, so that teardown removes one a killed service left."""
    return [Runtime(PERSISTENCED_SOCKET)]
