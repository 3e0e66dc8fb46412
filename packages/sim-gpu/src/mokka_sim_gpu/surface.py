"""The gpu surface: the driver footprint of a simulated NVIDIA GPU node.

States (read from the node state):

- enabled, healthy: the NVML library chain and state file; the driver package's other libraries (``libcuda.so.1``,
  ...: stubs with their sonames, :func:`.library.driver_library_entries`); ``/usr/bin/nvidia-smi``; the module
  files under
  ``lib/modules/<release>`` (for ``modinfo``); ``/dev/nvidia*``; ``/proc/driver/nvidia``; the
  four NVIDIA modules loaded in ``/proc/modules`` and ``/sys/module`` (with the HCAs' InfiniBand modules and the
  GPUDirect ones of ``system.gpudirect``: :mod:`.modules`); their majors (and the other
  surfaces') in ``/proc/devices``; the kernel log of the
  node's Xids, served at ``/dev/kmsg`` by the ``mokka-kmsg`` service; the MIG capabilities of the
  partition the NVML library keeps (``mig_caps``), re-staged whenever it changes.  Enabled in either state:
  the ``mokka-persistenced`` service at ``run/nvidia-persistenced/socket``, which passes the state file to
  the library of a GPU container (which has none beside it).
- enabled, failed: like a node whose kernel module failed to load: the library chain, the
  state file (which makes NVML init report the driver as not loaded), nvidia-smi and the installed module
  files (``modinfo`` still works), and nothing of the driver loaded: no ``/dev/nvidia*``, ``/proc`` or ``/sys``
  (the HCAs' modules stay listed).
  The same when the pci surface is disabled: with no NVIDIA GPU on the bus the module does not load.
- disabled: nothing at all (no driver installed).

Lost and fallen-off-bus GPUs (and every GPU when the pci surface is failed) keep their
``/dev/nvidiaN`` and ``/proc`` entries, as the real driver does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mokka_core.stage.surface import Entry, PlanPart, Service, StageContext, Surface

from .device_nodes import char_majors, device_node_entries, proc_devices_entries
from .kernel_log import kernel_log_entries
from .kernel_objects import kernel_object_entries
from .kmsg_service import kmsg_service
from .library import driver_library_entries, library_entries, state_file_entries
from .mig_caps import mig_cap_entries
from .modules import module_entries
from .persistenced_service import persistenced_service, socket_entries
from .render_proc import proc_entries
from .tools import nvidia_smi_entries

if TYPE_CHECKING:
    from collections.abc import Callable

    from mokka_core.model.node import Node


def _installed(build: Callable[[Node, StageContext], list[Entry]]) -> Callable[[Node, StageContext], list[Entry]]:
    """``build`` where the driver is installed (the surface enabled); nothing otherwise."""

    def part(node: Node, ctx: StageContext) -> list[Entry]:
        return build(node, ctx) if node.surface("gpu").enabled else []

    return part


def _loaded(build: Callable[[Node, StageContext], list[Entry]]) -> Callable[[Node, StageContext], list[Entry]]:
    """``build`` where the kernel module is loaded (the surface healthy, GPUs on the bus); nothing otherwise."""

    def part(node: Node, ctx: StageContext) -> list[Entry]:
        return build(node, ctx) if node.driver_loaded else []

    return part


#: The plan in the order it is staged, each part with the GPU configuration fields it reads: a reading
#: (temperature, power, clocks, …) is in the NVML state file alone, so only that part is built again.
PARTS = (
    PlanPart("library", _installed(library_entries), frozenset()),
    PlanPart("driver-libraries", _installed(driver_library_entries), frozenset()),
    PlanPart("nvml-state", _installed(state_file_entries)),
    PlanPart("nvidia-smi", _installed(lambda node, ctx: nvidia_smi_entries(node)), frozenset()),
    PlanPart("persistenced-socket", _installed(lambda node, ctx: socket_entries()), frozenset()),
    PlanPart("module-files", _installed(lambda node, ctx: kernel_object_entries(node)), frozenset()),
    PlanPart("device-nodes", _loaded(lambda node, ctx: device_node_entries(node)), frozenset()),
    PlanPart("proc", _loaded(lambda node, ctx: proc_entries(node)),
             frozenset({"name", "architecture", "vbios_version", "gsp_firmware", "failure"})),
    # the driver's modules where it is loaded, the HCAs' wherever there are some (modules.loaded_modules)
    PlanPart("modules", _installed(lambda node, ctx: module_entries(node)), frozenset({"persistence_mode"})),
    PlanPart("mig-caps", _loaded(mig_cap_entries), frozenset({"mig"})),
    PlanPart("proc-devices", _loaded(proc_devices_entries), frozenset()),
    PlanPart("kernel-log", _loaded(kernel_log_entries), frozenset({"xid_events", "nvlink_error"})),
)


class GpuSurface(Surface):
    name = "gpu"

    def plan(self, node: Node, ctx: StageContext) -> list[Entry]:
        return [entry for part in PARTS for entry in part.build(node, ctx)]

    def parts(self) -> tuple[PlanPart, ...]:
        return PARTS

    def char_majors(self, node: Node, ctx: StageContext) -> tuple[tuple[int, str], ...]:
        return char_majors(node) if node.driver_loaded and node.surface("gpu").enabled else ()

    def services(self, node: Node, ctx: StageContext) -> list[Service]:
        """The kernel log at /dev/kmsg (served where the node is shown at the real paths; see
        :mod:`.kmsg_service`), also written to the host's kernel log where the node was asked to
        (``ctx.host_kmsg``); wherever the driver is installed, the NVML state for GPU containers at
        nvidia-persistenced's socket (:mod:`.persistenced_service`)."""
        gpu = node.surface("gpu")
        return [*([kmsg_service(ctx)] if gpu.active else []), *([persistenced_service(ctx)] if gpu.enabled else [])]
