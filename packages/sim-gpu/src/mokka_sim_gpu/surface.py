"""The gpu surface: the driver footprint of a simulated NVIDIA GPU node.

States (read from the node state):

- enabled, healthy: the NVML library chain and state file; ``/usr/bin/nvidia-smi``; the module files under
  ``lib/modules/<release>`` (for ``modinfo``); ``/dev/nvidia*``; ``/proc/driver/nvidia``; the
  four NVIDIA modules loaded in ``/proc/modules`` and ``/sys/module``; their majors (and the other
  surfaces') in ``/proc/devices``; the kernel log of the
  node's Xids, served at ``/dev/kmsg`` by the ``mokka-kmsg`` service; the MIG capabilities of the
  partition the NVML library keeps (``mig_caps``), re-staged whenever it changes.
- enabled, failed: like a node whose kernel module failed to load: the library chain, the
  state file (which makes NVML init report the driver as not loaded), nvidia-smi and the installed module
  files (``modinfo`` still works), and nothing loaded: no ``/dev/nvidia*``, ``/proc`` or ``/sys``.
  The same when the pci surface is disabled: with no NVIDIA GPU on the bus the module does not load.
- disabled: nothing at all (no driver installed).

Lost and fallen-off-bus GPUs (and every GPU when the pci surface is failed) keep their
``/dev/nvidiaN`` and ``/proc`` entries, as the real driver does.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from mokka_core.stage.surface import Entry, Service, StageContext, Surface

from .device_nodes import char_majors, device_node_entries, proc_devices_entries
from .kernel_log import READY, kernel_log_entries
from .kernel_objects import kernel_object_entries
from .library import library_entries, state_file_entries
from .mig_caps import mig_cap_entries
from .modules import module_entries
from .render_proc import proc_entries
from .tools import nvidia_smi_entries

if TYPE_CHECKING:
    from mokka_core.model.node import Node


class GpuSurface(Surface):
    name = "gpu"

    def plan(self, node: Node, ctx: StageContext) -> list[Entry]:
        settings = node.surface("gpu")
        if not settings.enabled:
            return []
        entries = library_entries(node, ctx) + state_file_entries(node, ctx) + nvidia_smi_entries(node)
        entries += kernel_object_entries(node)
        if node.driver_loaded:
            entries += device_node_entries(node) + proc_entries(node) + module_entries(node)
            entries += mig_cap_entries(node, ctx) + proc_devices_entries(node, ctx)
            entries += kernel_log_entries(node)
        return entries

    def char_majors(self, node: Node, ctx: StageContext) -> tuple[tuple[int, str], ...]:
        return char_majors(node) if node.driver_loaded and node.surface("gpu").enabled else ()

    def services(self, node: Node, ctx: StageContext) -> list[Service]:
        """The kernel log at /dev/kmsg (served where the node is shown at the real paths; see :mod:`.kmsg`),
        also written to the host's kernel log where the node was asked to (``ctx.host_kmsg``)."""
        if not node.surface("gpu").active:
            return []
        command = [sys.executable, "-m", "mokka_sim_gpu.kmsg", "--root", str(ctx.root)]
        if ctx.host_kmsg is not None:
            command += ["--host-kmsg", ctx.host_kmsg]
        return [Service(name="mokka-kmsg", command=command, ready_path=READY)]
