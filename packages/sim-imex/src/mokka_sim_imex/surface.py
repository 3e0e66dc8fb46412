"""The imex surface: channel devices, the IMEX majors, the management capability and the daemon.

What a GB200/GB300 node with the IMEX driver bits and the ``nvidia-imex`` package looks like:
``/dev/nvidia-caps-imex-channels/channel<i>`` (char devices on the ``nvidia-caps-imex-channels``
major), the ``fabric-imex-mgmt`` capability (its proc file and ``/dev/nvidia-caps`` node),
a substitute ``/proc/devices`` naming both majors (for the DRA driver's ``altProcDevices``; where the
gpu surface is staged too, ``/proc/devices`` itself names the channels' major: ``char_majors``),
and ``/etc/nvidia-imex/{config.cfg,nodes_config.cfg}`` for the daemon; the package's programs at their real paths,
``/usr/bin/nvidia-imex`` and ``/usr/bin/nvidia-imex-ctl`` (each a launcher of this package's daemon and ctl, the
programs the node's service runs: what the DRA driver and nvidia-ctk find on a tray).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from mokka_core.stage.store import IMEX_DIR
from mokka_core.stage.surface import CharDevice, Dir, Entry, File, Service, StageContext, Surface

if TYPE_CHECKING:
    from mokka_core.model.node import Node

CHANNEL_DIR = "dev/nvidia-caps-imex-channels"
CAPS_DIR = "dev/nvidia-caps"
CAPABILITY_FILE = "proc/driver/nvidia/capabilities/fabric-imex-mgmt"
PROC_DEVICES_FILE = f"{IMEX_DIR}/proc-devices"
#: the driver's channel limit; the DRA driver allocates channel ids below it
CHANNEL_COUNT = 2048
#: minor of the fabric-imex-mgmt capability on the nvidia-caps major
IMEX_MGMT_MINOR = 512
#: the nvidia-imex package's programs, and the module of this package each one runs
PROGRAMS = {"usr/bin/nvidia-imex": "mokka_sim_imex.daemon", "usr/bin/nvidia-imex-ctl": "mokka_sim_imex.ctl"}


def program_launcher(module: str) -> str:
    """A program at the real path that runs ``module`` with this interpreter (where this package is installed)."""
    return f'#!/bin/sh\nexec {sys.executable} -m {module} "$@"\n'


class ImexSurface(Surface):
    name = "imex"
    #: a GPU's configuration changes nothing here (faults, metrics): only the node's GPUs and settings do
    reads = frozenset[str]()

    def plan(self, node: Node, ctx: StageContext) -> list[Entry]:
        # loaded where a plan is built: nvml-mock-ctl loads every surface, builds only the plans a change reads
        from mokka_core.stage import procdevices

        from .config import (
            CONFIG_DIR,
            CONFIG_FILE,
            NODES_CONFIG_FILE,
            loopback_address,
            render_config,
            render_nodes_config,
        )

        text, source = procdevices.host_proc_devices()
        majors = procdevices.choose_majors(text, source)
        entries: list[Entry] = [Dir(CHANNEL_DIR), Dir(CAPS_DIR)]
        entries += [CharDevice(f"{CHANNEL_DIR}/channel{i}", majors.imex_channels, i) for i in range(CHANNEL_COUNT)]
        entries.append(CharDevice(f"{CAPS_DIR}/nvidia-cap{IMEX_MGMT_MINOR}", majors.caps, IMEX_MGMT_MINOR, mode=0o444))
        entries.append(File(CAPABILITY_FILE,
                            f"DeviceFileMinor: {IMEX_MGMT_MINOR}\nDeviceFileMode: 292\nDeviceFileModify: 1\n",
                            mode=0o444))
        entries.append(File(PROC_DEVICES_FILE, procdevices.render(text, majors.lines(), source), mode=0o444))
        entries.append(Dir(CONFIG_DIR))
        address = loopback_address(ctx.root)
        entries.append(File(CONFIG_FILE, render_config(ctx.root, node_ip=address)))
        entries.append(File(NODES_CONFIG_FILE, render_nodes_config([address])))
        entries += [File(path, program_launcher(module), mode=0o755) for path, module in PROGRAMS.items()]
        return entries

    def char_majors(self, node: Node, ctx: StageContext) -> tuple[tuple[int, str], ...]:
        """The channels' major (``nvidia-caps``, which the management node uses too, is the driver's line)."""
        from mokka_core.stage import procdevices

        return ((procdevices.host_majors().imex_channels, procdevices.IMEX_CHANNELS_NAME),)

    def services(self, node: Node, ctx: StageContext) -> list[Service]:
        from .config import CONFIG_FILE

        command = [sys.executable, "-m", "mokka_sim_imex.daemon", "-c", str(ctx.root / CONFIG_FILE)]
        if node.surface(self.name).state == "failed":
            command.append("--failed")
        return [Service(name="nvidia-imex", command=command)]

    def check(self, node: Node, ctx: StageContext) -> list[str]:
        from .config import CONFIG_FILE, NODES_CONFIG_FILE

        editable = (CONFIG_FILE, NODES_CONFIG_FILE)  # an administrator (or the DRA driver) edits them after staging
        problems = []
        for entry in self.plan(node, ctx):
            target = ctx.root / entry.path
            if not (target.exists() or target.is_symlink()):
                problems.append(f"{self.name}: missing /{entry.path}")
            elif isinstance(entry, File) and entry.path not in editable and target.read_bytes() != entry.data():
                problems.append(f"{self.name}: /{entry.path} differs from the node state")
        return problems
