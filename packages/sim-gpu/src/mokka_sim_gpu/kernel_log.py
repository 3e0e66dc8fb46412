"""The node's kernel log: the driver's lines from loading, then each Xid the node raised, as the NVIDIA driver
prints them, in /dev/kmsg's record form.

A record is ``priority,sequence,microseconds,flags;text`` (the kernel's
Documentation/ABI/testing/dev-kmsg).  The driver prints with printk's default level,
4 (warning), facility kern.  The time stamp is the Xid record's own (stamped when it
was raised); nothing here reads a clock, and the loading lines are stamped 0 (the node's boot).
A log is never empty while the driver is loaded, as on a real node: util-linux dmesg, finding
/dev/kmsg empty, would fall back to syslog(2) and show the host's kernel log instead.  Xids raised by
``nvml-mock-ctl`` have no process behind them, which the driver prints as ``pid='<unknown>', name=<unknown>``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mokka_core.stage.store import KERNEL_LOG, RUN_DIR
from mokka_core.stage.surface import Entry, File

from .device_nodes import UVM_MAJOR
from .render_proc import BUILD_DATE, kernel_arch

if TYPE_CHECKING:
    from mokka_core.model.node import Node

PRIORITY = 4  # LOG_KERN | LOG_WARNING
#: the marker the /dev/kmsg service (:mod:`.kmsg_service`) writes once it serves
READY = f"{RUN_DIR}/kmsg.ready"
UNKNOWN_PROCESS = "pid='<unknown>', name=<unknown>"
#: What the driver says after the process, for the Xids the node raises itself (fail fallen-off-bus,
#: fail ecc-dbe) and the memory-error ones; other codes end at the process, which log watchers
#: (their pattern is ``NVRM: Xid (...): <code>,``) read the same.
XID_TEXT = {
    48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 0, "
        "subpartition 0.",
    63: "Row Remapper: New row marked for remapping, reset gpu to activate.",
    64: "Row Remapper: Failed to remap row.",
    79: "GPU has fallen off the bus.",
}


def xid_location(bus_id: str) -> str:
    """NVML's 00000000:1B:00.0 -> the driver's PCI:0000:1b:00 (domain, bus, device)."""
    domain, bus, rest = bus_id.lower().split(":")
    return f"PCI:{domain[-4:]}:{bus}:{rest.split('.')[0]}"


def loading_messages(driver_version: str) -> list[str]:
    """What the four modules print as they load (proprietary, out of tree: ``modules.TAINT``), nvidia first;
    the NVRM banner is /proc/driver/nvidia/version's first line."""
    return [
        "nvidia: loading out-of-tree module taints kernel.",
        "nvidia: module license 'NVIDIA' taints kernel.",
        f"NVRM: loading NVIDIA UNIX {kernel_arch()} Kernel Module  {driver_version}  {BUILD_DATE}",
        f"nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver for UNIX platforms  {driver_version}  {BUILD_DATE}",
        f"nvidia-uvm: Loaded the UVM driver, major device number {UVM_MAJOR}.",
    ]


#: how many records the loading lines are, at the start of every log (``len(loading_messages(...))``)
LOADING_RECORDS = 5


def kernel_log(node: Node) -> str:
    """The driver's loading lines, then every Xid of the node, oldest first, as /dev/kmsg records."""
    events = sorted((event.seq, event.usec or 0, gpu, event.code)
                    for gpu in node.gpus for event in gpu.config.xid_events or ())
    lines = [f"{PRIORITY},{seq},0,-;{message}\n" for seq, message in
             enumerate(loading_messages(node.driver_version), start=1)]
    for _, usec, gpu, code in events:
        text = f", {XID_TEXT[code]}" if code in XID_TEXT else ""
        messages = [f"NVRM: Xid ({xid_location(gpu.bus_id)}): {code}, {UNKNOWN_PROCESS}{text}"]
        if code == 79:
            messages.append(f"NVRM: GPU {gpu.bus_id.lower()[-12:]}: GPU has fallen off the bus.")
        for message in messages:
            lines.append(f"{PRIORITY},{len(lines) + 1},{usec},-;{message}\n")
    return "".join(lines)


def kernel_log_entries(node: Node) -> list[Entry]:
    return [File(KERNEL_LOG, kernel_log(node), mode=0o644)]

