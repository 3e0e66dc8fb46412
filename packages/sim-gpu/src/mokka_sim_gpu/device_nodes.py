"""``/dev/nvidia*``: the character devices the NVIDIA kernel modules create, and their ``/proc/devices`` lines.

195 is NVIDIA's registered major (Documentation/admin-guide/devices.txt); nvidia-uvm gets a
dynamic major, which the kernel hands out downwards from 511 (``CHRDEV_MAJOR_DYN_EXT_START``)
once the classic dynamic range is used up.  ``nvidia.ko`` registers 195 as ``nvidia`` (minors
0-254) and ``nvidiactl`` (255) since 550.40 (``nv.c``); before, its frontend registered the whole
major as ``nvidia-frontend`` (nvidia-container-toolkit's ``proc/devices`` reader accepts both).
It also registers ``nvidia-caps`` on a dynamic major (``nv-caps.c``), shared with the imex surface.
The gpu surface stages ``/proc/devices`` with these lines and the other surfaces' (``char_majors``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mokka_core.stage import procdevices
from mokka_core.stage.surface import CharDevice, Entry, File, StageContext

if TYPE_CHECKING:
    from mokka_core.model.node import Node

NVIDIA_MAJOR = 195
NVIDIACTL_MINOR = 255
MODESET_MINOR = 254
UVM_MAJOR = 509  # dynamic: what a node that loaded nvidia.ko first and nvidia_uvm after usually gets
PROC_DEVICES = "proc/devices"
#: the first driver whose nvidia.ko names its 195 regions ``nvidia`` and ``nvidiactl``
SPLIT_MAJOR_SINCE = (550, 40)


def char_majors(node: Node) -> tuple[tuple[int, str], ...]:
    """The ``(major, name)`` lines the loaded modules register, in the kernel's order within a major."""
    release = tuple(int(part) for part in node.driver_version.split(".")[:2] if part.isdigit())
    frontend = [(NVIDIA_MAJOR, "nvidia"), (NVIDIA_MAJOR, "nvidiactl")] if release >= SPLIT_MAJOR_SINCE \
        else [(NVIDIA_MAJOR, "nvidia-frontend")]
    return (*frontend, (procdevices.host_majors().caps, procdevices.CAPS_NAME), (UVM_MAJOR, "nvidia-uvm"))


def proc_devices_entries(node: Node, ctx: StageContext) -> list[Entry]:
    """``/proc/devices``: the host's, with the node's drivers' lines (``mokka run`` binds it over the real one)."""
    text, source = procdevices.host_proc_devices()
    lines = procdevices.render(text, [*char_majors(node), *ctx.char_majors], source)
    return [File(PROC_DEVICES, lines, mode=0o444)]


def device_node_entries(node: Node) -> list[Entry]:
    entries: list[Entry] = [
        # a GPU that is lost or fell off the bus keeps its node: the driver never removes it
        CharDevice(f"dev/nvidia{gpu.minor_number}", NVIDIA_MAJOR, gpu.minor_number)
        for gpu in node.gpus
    ]
    entries += [
        CharDevice("dev/nvidiactl", NVIDIA_MAJOR, NVIDIACTL_MINOR),
        CharDevice("dev/nvidia-modeset", NVIDIA_MAJOR, MODESET_MINOR),
        CharDevice("dev/nvidia-uvm", UVM_MAJOR, 0),
        CharDevice("dev/nvidia-uvm-tools", UVM_MAJOR, 1),
    ]
    return entries
