"""The ``mokka-kmsg`` service: the node's kernel log at ``/dev/kmsg`` one record per read, as the kernel serves it.

A small C program (``native/kmsg``; ``make -C native install`` puts it beside the mock library) that
speaks the FUSE kernel protocol on /dev/fuse.  It serves where the root is shown at the real paths
(``mokka run``), idles elsewhere, never covers the host's own /dev/kmsg, and with ``--host-kmsg``
also writes each record of the node's log once to the host's kernel log (see its ``main.c``).  The
paths it reads and writes are the node's, passed here, never known to it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mokka_core.stage.store import KERNEL_LOG, KERNEL_LOG_FORWARDED
from mokka_core.stage.surface import Service

from .kernel_log import LOADING_RECORDS, READY
from .library import service_program

if TYPE_CHECKING:
    from mokka_core.stage.surface import StageContext

PROGRAM = "mokka-kmsg"



def kmsg_service(ctx: StageContext) -> Service:
    program = service_program(PROGRAM, ctx)
    command = [str(program), "--root", str(ctx.root), "--log", KERNEL_LOG, "--ready", READY,
               "--forwarded", KERNEL_LOG_FORWARDED, "--loading-records", str(LOADING_RECORDS)]
    if ctx.host_kmsg is not None:
        command += ["--host-kmsg", ctx.host_kmsg]
    return Service(name=PROGRAM, command=command, ready_path=READY)
