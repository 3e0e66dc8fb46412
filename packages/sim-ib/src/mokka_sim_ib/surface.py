"""The ib surface: ConnectX HCAs in /sys/class/infiniband*, /dev/infiniband, and a MAD responder.

A consumer of the node (ibping, ibv_devinfo) needs the LD_PRELOAD shim, which sends its
UMAD and verbs queries to the responder's socket.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from mokka_core.stage.native import native_library
from mokka_core.stage.store import IB_DIR
from mokka_core.stage.surface import ConsumerNeeds, Dir, Entry, File, Service, StageContext, Surface

if TYPE_CHECKING:
    from mokka_core.model.node import Node


SHIM_NAME = "libmokka-ib.so"
SHIM_DIR = Path(__file__).parent / "_native"  # `make -C packages/sim-ib/native install` puts it here
SHIM_ENV = "MOKKA_IB_SHIM"
SOCKET_ENV = "MOKKA_IB_SOCKET"


def shim_path() -> Path | None:
    """The built shim ($MOKKA_IB_SHIM overrides); None if it has not been built."""
    return native_library(SHIM_NAME, SHIM_DIR, SHIM_ENV)


def consumer_needs(root: Path) -> ConsumerNeeds:
    """The shim preloaded and the node's responder socket; without a built shim, only the socket."""
    from . import config

    shim = shim_path()
    if shim is None:
        import logging  # here only: nvml-mock-ctl loads every surface module and must not pay for logging

        logging.getLogger(__name__).info("%s is not built (make -C packages/sim-ib/native install): MAD and verbs "
                                         "tools (ibping, ibv_devinfo) will not see the HCAs", SHIM_NAME)
    return ConsumerNeeds(preload=(str(shim),) if shim is not None else (),
                         environment={SOCKET_ENV: str(root.absolute() / config.SOCKET)})


class IbSurface(Surface):
    name = "ib"
    #: a GPU's configuration changes nothing here (faults, metrics): only the node's GPUs and settings do
    reads = frozenset[str]()

    def plan(self, node: Node, ctx: StageContext) -> list[Entry]:
        # loaded where a plan is built: nvml-mock-ctl loads every surface, builds only the plans a change reads
        from . import config, hca, sysfs

        views = hca.ports(node)
        if not views:
            return []
        node_file = hca.node_config(node, views).to_text()
        return [
            *sysfs.device_entries(node, views),
            Dir(IB_DIR),
            File(config.NODE_CONFIG, node_file, mode=0o644),
        ]

    def services(self, node: Node, ctx: StageContext) -> list[Service]:
        from . import config, hca, responder

        if not hca.ports(node):
            return []
        return [Service(name=responder.PROGRAM, command=responder.command(ctx.root, ctx.native_dir),
                        ready_path=config.SOCKET)]

    def consumer(self, node: Node, ctx: StageContext) -> ConsumerNeeds:
        from . import hca

        return consumer_needs(ctx.root) if hca.ports(node) else ConsumerNeeds()
