"""A hand-made minimal node for testing ``mokka run`` / ``mokka shim`` without the sim packages.

Two tiny surfaces that follow the gpu and pci contracts of DESIGN.md §4 just far
enough for lspci, lsmod, ls and cat: one NVIDIA H100 function per GPU in sysfs with a
64-byte config header, its driver link, /dev/nvidia*, /proc/driver/nvidia,
/proc/modules, /sys/module/nvidia and, if built, the mock library chain.

Run as a script (what the tests do, also as an unprivileged user)::

    python fake_node.py [--shim] [--gpus N] [--disable gpu] [--daemon ready|exit] -- CMD [ARGS...]

``--daemon`` adds a surface with one service (a tiny daemon that marks itself ready
under the root after a moment, or exits at once) and a consumer environment variable.
"""

from __future__ import annotations

import argparse
import struct
import sys

from mokka_core.model.node import Node
from mokka_core.model.spec import NodeSpec, surface_settings
from mokka_core.run.command import main_run
from mokka_core.stage.paths import LIB_DIR
from mokka_core.stage.surface import (
    CharDevice,
    ConsumerNeeds,
    Copy,
    Dir,
    Entry,
    File,
    Service,
    StageContext,
    Surface,
    Symlink,
)

VENDOR, DEVICE, CLASS = 0x10DE, 0x2330, 0x030200


def sysfs_bdf(bus_id: str) -> str:
    """NVML's 00000000:18:00.0 -> sysfs 0000:18:00.0"""
    return bus_id.lower()[-12:]


def config_header() -> bytes:
    header = struct.pack("<HHHHIBBBB", VENDOR, DEVICE, 0x0006, 0x0010, (CLASS << 8) | 0xA1, 0, 0, 0, 0)
    return header.ljust(64, b"\0")


class FakePci(Surface):
    name = "pci"

    def plan(self, node: Node, ctx: StageContext) -> list[Entry]:
        gpu_on = node.surfaces["gpu"].enabled if "gpu" in node.surfaces else True
        entries: list[Entry] = [Dir("sys/bus/pci/drivers/nvidia")]
        for gpu in node.gpus:
            bdf = sysfs_bdf(gpu.bus_id)
            device = f"sys/devices/pci{bdf[:7]}/{bdf}"
            entries += [
                File(f"{device}/vendor", f"0x{VENDOR:04x}\n"),
                File(f"{device}/device", f"0x{DEVICE:04x}\n"),
                File(f"{device}/class", f"0x{CLASS:06x}\n"),
                File(f"{device}/config", config_header()),
                Symlink(f"sys/bus/pci/devices/{bdf}", f"../../../devices/pci{bdf[:7]}/{bdf}"),
            ]
            if gpu_on:
                entries.append(Symlink(f"{device}/driver", "../../../bus/pci/drivers/nvidia"))
        return entries


class FakeGpu(Surface):
    name = "gpu"

    def plan(self, node: Node, ctx: StageContext) -> list[Entry]:
        entries: list[Entry] = [CharDevice("dev/nvidiactl", 195, 255)]
        entries += [CharDevice(f"dev/nvidia{gpu.minor_number}", 195, gpu.minor_number) for gpu in node.gpus]
        entries += [
            File("proc/driver/nvidia/version",
                 f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {node.system.driver_version}  (mokka test)\n"),
            File("proc/modules", "nvidia_uvm 4923392 0 - Live 0x0000000000000000 (POE)\n"
                                 "nvidia 54341632 1 nvidia_uvm, Live 0x0000000000000000 (POE)\n"),
            File("sys/module/nvidia/refcnt", "1\n"),
            File("sys/module/nvidia/coresize", "54341632\n"),
            File("sys/module/nvidia/initstate", "live\n"),
            File("sys/module/nvidia/version", f"{node.system.driver_version}\n"),
            Dir("sys/module/nvidia/holders"),
            File("sys/module/nvidia_uvm/refcnt", "0\n"),
            File("sys/module/nvidia_uvm/coresize", "4923392\n"),
            File("sys/module/nvidia_uvm/initstate", "live\n"),
            Dir("sys/module/nvidia_uvm/holders"),
        ]
        for gpu in node.gpus:
            entries.append(File(f"proc/driver/nvidia/gpus/{sysfs_bdf(gpu.bus_id)}/information",
                                f"Model: \t\t {gpu.config.name}\nBus Location: \t {sysfs_bdf(gpu.bus_id)}\n"))
        libs = sorted(ctx.native_dir.glob("libnvidia-ml.so.*.*")) if ctx.native_dir else []
        if libs:
            entries += [Copy(f"{LIB_DIR}/{libs[0].name}", libs[0]),
                        Symlink(f"{LIB_DIR}/libnvidia-ml.so.1", libs[0].name)]
        return entries


DAEMON_READY = "var/lib/mokka/run/fake-daemon.ready"
#: ready after 0.3 s (the pid in its marker), removes the marker on SIGTERM; "exit": fails at once
DAEMON = """
import os, signal, sys, time
if sys.argv[1] == "exit":
    sys.exit(3)
marker = os.path.join(os.environ["MOKKA_ROOT"], sys.argv[2])
signal.signal(signal.SIGTERM, lambda *_: (os.unlink(marker), sys.exit(0)))
time.sleep(0.3)
with open(marker + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(marker + ".tmp", marker)
while True:
    time.sleep(1)
"""


class FakeDaemon(Surface):
    name = "daemon"
    mode = "ready"

    def plan(self, node: Node, ctx: StageContext) -> list[Entry]:
        return [Dir("var/lib/mokka/run")]

    def services(self, node: Node, ctx: StageContext) -> list[Service]:
        return [Service("fake-daemon", [sys.executable, "-c", DAEMON, self.mode, DAEMON_READY],
                        ready_path=DAEMON_READY)]

    def consumer(self, node: Node, ctx: StageContext) -> ConsumerNeeds:
        return ConsumerNeeds(environment={"MOKKA_FAKE_DAEMON": str(ctx.root / DAEMON_READY)})


class FailingDaemon(FakeDaemon):
    mode = "exit"


SURFACES: dict[str, type[Surface]] = {"gpu": FakeGpu, "pci": FakePci}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shim", action="store_true")
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--disable", action="append", default=[])
    parser.add_argument("--fail", action="append", default=[])
    parser.add_argument("--daemon", choices=["ready", "exit"])
    parser.add_argument("--node-name")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    spec = NodeSpec(profile="h100", gpus=args.gpus, surfaces=surface_settings(args.disable, args.fail),
                    node_name=args.node_name)
    surfaces = dict(SURFACES)
    if args.daemon:
        surfaces["daemon"] = FakeDaemon if args.daemon == "ready" else FailingDaemon
    return main_run(spec, command, use_shim=args.shim, surfaces=surfaces)


if __name__ == "__main__":
    sys.exit(main())
