"""The node's kernel log: the driver's lines from loading, then each Xid the node raised, as the NVIDIA driver
prints them, in /dev/kmsg's record form.

A record is ``priority,sequence,microseconds,flags;text`` (the kernel's
Documentation/ABI/testing/dev-kmsg); a line break inside one record's text is escaped ``\\x0a``, as the
kernel escapes it.  The driver prints with printk's default level, 4 (warning), facility kern.  An Xid
record's time stamp is its own (stamped when it was raised, on the host's monotonic clock); the loading
lines are stamped when the node came up (``StageContext.booted_ms``, as seconds since the host booted).
A log is never empty while the driver is loaded, as on a real node: util-linux dmesg, finding
/dev/kmsg empty, would fall back to syslog(2) and show the host's kernel log instead.  Xids raised by
``nvml-mock-ctl`` have no process behind them, which the driver prints as ``pid='<unknown>', name=<unknown>``.
After the process comes the driver's detail for that code (:data:`XID_TEXT`, from real nodes' logs);
a GPU that fell off the bus also prints the driver's "fallen off the bus and is not responding" message
(``nv.c``, three lines in one record); an NVLink error (Xid 74) on a board whose links go to NVSwitches is
reported by the switch too, as an SXid of the ``nvidia-nvswitch<N>`` driver.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mokka_core.stage.store import KERNEL_LOG, RUN_DIR
from mokka_core.stage.surface import Entry, File

from .device_nodes import UVM_MAJOR
from .render_proc import build_date, kernel_arch

if TYPE_CHECKING:
    from mokka_core.model.node import Gpu, Node
    from mokka_core.stage.surface import StageContext

PRIORITY = 4  # LOG_KERN | LOG_WARNING
#: the marker the /dev/kmsg service (:mod:`.kmsg_service`) writes once it serves
READY = f"{RUN_DIR}/kmsg.ready"
UNKNOWN_PROCESS = "pid='<unknown>', name=<unknown>"
#: What the driver says after the process, per code (real nodes' logs, NVIDIA's Xid catalog): the Xids the node
#: raises itself (fail fallen-off-bus, fail ecc-dbe, nvlink-error), the memory-error and the common application
#: ones; other codes end at the process, which log watchers (their pattern is ``NVRM: Xid (...): <code>,``) read
#: the same.
XID_TEXT = {
    13: "Graphics SM Warp Exception on (GPC 1, TPC 3, SM 0): Out Of Range Address",
    31: "channel 0x00000002, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC0 GPCCLIENT_T1_0 faulted @ 0x33_8404d000. "
        "Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
    48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 0, "
        "subpartition 0.",
    63: "Row Remapper: New row marked for remapping, reset gpu to activate.",
    64: "Row Remapper: Failed to remap row.",
    79: "GPU has fallen off the bus.",
}
XID_NVLINK = 74
XID_FALLEN_OFF_BUS = 79
#: the NVSwitch's report of a link whose errors pass its threshold (non-fatal; the link stays up)
SXID_NVLINK_ERROR_RATE = (20009, "Non-fatal", "RX Short Error Rate")
#: a record's text is one line: a line break inside it is escaped as the kernel escapes it in /dev/kmsg
NEWLINE = "\\x0a"


def xid_location(bus_id: str) -> str:
    """NVML's 00000000:1B:00.0 -> the driver's PCI:0000:1b:00 (domain, bus, device)."""
    domain, bus, rest = bus_id.lower().split(":")
    return f"PCI:{domain[-4:]}:{bus}:{rest.split('.')[0]}"


def loading_messages(driver_version: str) -> list[str]:
    """What the four modules print as they load (proprietary, out of tree: ``modules.TAINT``), nvidia first;
    the NVRM banner is /proc/driver/nvidia/version's first line."""
    built = build_date(driver_version)
    return [
        "nvidia: loading out-of-tree module taints kernel.",
        "nvidia: module license 'NVIDIA' taints kernel.",
        f"NVRM: loading NVIDIA UNIX {kernel_arch()} Kernel Module  {driver_version}  {built}",
        f"nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver for UNIX platforms  {driver_version}  {built}",
        f"nvidia-uvm: Loaded the UVM driver, major device number {UVM_MAJOR}.",
    ]


#: how many records the loading lines are, at the start of every log (``len(loading_messages(...))``)
LOADING_RECORDS = 5


def fallen_off_message(gpu: Gpu) -> str:
    """nv.c's message for a GPU that no longer answers (its PCI ID from NVML's device id: device<<16 | vendor)."""
    ids = gpu.config.pci.device_id
    bdf = gpu.bus_id.lower()[-12:]
    return NEWLINE.join((
        f"NVRM: The NVIDIA GPU {bdf}",
        f"NVRM: (PCI ID: {ids & 0xFFFF:04x}:{ids >> 16:04x}) installed in this system has",
        "NVRM: fallen off the bus and is not responding to commands.",
    ))


def nvlink_error_link(gpu: Gpu) -> int:
    """The link an NVLink error is reported on: the first the fault names, else the GPU's first link."""
    named = gpu.config.nvlink_error.links
    return named[0] if named else (gpu.links[0].link if gpu.links else 0)


def sxid_message(node: Node, gpu: Gpu, link: int) -> str | None:
    """The NVSwitch driver's SXid for errors on ``link`` of ``gpu``, where that link goes to a switch on this node's bus
    (a GB200 tray's switches sit in the switch trays, whose own OS logs their SXids)."""
    remote = next((candidate for candidate in gpu.links if candidate.link == link), None)
    switch = next((sw for sw in node.switches
                   if sw.pci_visible and remote is not None and remote.remote_type == "switch"
                   and sw.bus_id.lower()[-12:] == (remote.remote_bus_id or "").lower()[-12:]), None)
    if switch is None:
        return None
    code, severity, text = SXID_NVLINK_ERROR_RATE
    port = link  # the switch port the node's NVML names as the link's remote (NVML_FI_DEV_NVLINK_REMOTE_NVLINK_ID)
    return f"nvidia-nvswitch{switch.index}: SXid (PCI:{switch.bus_id.lower()[-12:]}): {code}, {severity}, " \
           f"Link {port} {text}"


def xid_messages(node: Node, gpu: Gpu, code: int) -> list[str]:
    """What the driver (and an NVSwitch's) prints for Xid ``code`` on ``gpu``."""
    if code == XID_NVLINK:
        link = nvlink_error_link(gpu)
        detail = f", NVLink: fatal error detected on link {link}(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)"
    else:
        link, detail = 0, f", {XID_TEXT[code]}" if code in XID_TEXT else ""
    messages = [f"NVRM: Xid ({xid_location(gpu.bus_id)}): {code}, {UNKNOWN_PROCESS}{detail}"]
    if code == XID_FALLEN_OFF_BUS:
        messages += [f"NVRM: GPU {gpu.bus_id.lower()[-12:]}: GPU has fallen off the bus.", fallen_off_message(gpu)]
    elif code == XID_NVLINK:
        messages += [message for message in (sxid_message(node, gpu, link),) if message is not None]
    return messages


def kernel_log(node: Node, loaded_usec: int = 0) -> str:
    """The driver's loading lines (stamped ``loaded_usec``), then every Xid of the node, oldest first, as /dev/kmsg
    records."""
    events = sorted((event.seq, event.usec or 0, gpu.index, event.code)
                    for gpu in node.gpus for event in gpu.config.xid_events or ())
    lines = [f"{PRIORITY},{seq},{loaded_usec},-;{message}\n" for seq, message in
             enumerate(loading_messages(node.driver_version), start=1)]
    gpus = {gpu.index: gpu for gpu in node.gpus}
    for _, usec, index, code in events:
        for message in xid_messages(node, gpus[index], code):
            lines.append(f"{PRIORITY},{len(lines) + 1},{usec},-;{message}\n")
    return "".join(lines)


def uptime_usec(wall_ms: int) -> int:
    """Wall-clock ``wall_ms`` as microseconds since the host booted, never later than the host's monotonic clock (the
    Xid records') showed then: /proc/stat's btime is whole seconds, rounded down, so one second is taken off.  The
    same in every process (a plan is pure: re-staging the log must not move its first lines)."""
    try:
        with open("/proc/stat") as stat:
            btime = next(int(line.split()[1]) for line in stat if line.startswith("btime "))
    except (OSError, StopIteration, ValueError, IndexError):
        return 0
    return max(0, wall_ms * 1000 - (btime + 1) * 1_000_000)


def kernel_log_entries(node: Node, ctx: StageContext) -> list[Entry]:
    return [File(KERNEL_LOG, kernel_log(node, uptime_usec(ctx.booted_ms) if ctx.booted_ms else 0), mode=0o644)]
