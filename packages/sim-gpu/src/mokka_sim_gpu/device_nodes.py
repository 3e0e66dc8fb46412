"""``/dev/nvidia*``: the character devices the NVIDIA kernel modules create.

195 is NVIDIA's registered major (Documentation/admin-guide/devices.txt); nvidia-uvm gets a
dynamic major, which the kernel hands out downwards from 511 (``CHRDEV_MAJOR_DYN_EXT_START``)
once the classic dynamic range is used up.  Consumers that need the dynamic majors (a
substitute ``/proc/devices``) take them from :data:`CHAR_MAJORS`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mokka_core.stage.surface import CharDevice, Entry

if TYPE_CHECKING:
    from mokka_core.model.node import Node

NVIDIA_MAJOR = 195
NVIDIACTL_MINOR = 255
MODESET_MINOR = 254
UVM_MAJOR = 509  # dynamic: what a node that loaded nvidia.ko first and nvidia_uvm after usually gets

#: The character-device majors the loaded modules register, as ``/proc/devices`` names them.
CHAR_MAJORS = {"nvidia-frontend": NVIDIA_MAJOR, "nvidia-uvm": UVM_MAJOR}


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
