"""The CDI spec of a node: what a container runtime adds to a container to give it GPUs.

Devices are named by index, by UUID and ``all`` (containerd's ``enable_cdi`` with the device
plugin resolves UUID names); each MIG device, as ``nvidia-ctk cdi generate`` names them, by
``<gpu>:<mig>`` (its index among the GPU's MIG devices) and by its ``MIG-`` UUID, with the GPU's node
and the capability nodes of its GPU and compute instance.  Global edits carry what every GPU container needs: the
control and UVM device nodes, the mock library and its state file, and the environment
that ties them together.  Host paths point into the staged root.

The state file is replaced atomically by its writers, so it is never bind-mounted alone
(a bind mount keeps the old inode): its directory is mounted at ``STATE_MOUNT`` and the
library is told where to look with ``MOKKA_NVML_STATE``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from mokka_core.stage import mig_partition
from mokka_core.stage.paths import LIB_DIR, NVML_STATE_FILE

from .emit import block_yaml

if TYPE_CHECKING:
    from mokka_core.model.node import Node
    from mokka_core.stage.mig_partition import Partitions

SPEC_FILE = "var/run/cdi/nvidia.yaml"
KIND = "nvidia.com/gpu"
LIBRARY = f"{LIB_DIR}/libnvidia-ml.so.1"
#: where the library directory (with the state file) appears inside containers
STATE_MOUNT = "/var/lib/mokka/nvml"
STATE_ENV = "MOKKA_NVML_STATE"
MOUNT_OPTIONS = ["ro", "nosuid", "nodev", "bind"]
GLOBAL_DEVICES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")
#: failed: a spec generated for the GPU Operator's containerised driver, whose root is not there
MISSING_DRIVER_ROOT = "run/nvidia/driver"

#: CDI spec versions in order, and what first needs each (tags.cncf.io/container-device-interface
#: version rules); runtimes of Debian 12's age know versions up to 0.5.0 only.
VERSIONS = ("0.3.0", "0.4.0", "0.5.0", "0.6.0")


def device_root(root: Path, failed: bool) -> Path:
    return root / MISSING_DRIVER_ROOT if failed else root


def render(node: Node, root: Path, failed: bool = False, mig: Partitions | None = None) -> dict[str, Any]:
    """The spec; ``mig``: each GPU's partition (``StageContext.mig``), whose MIG devices it lists too."""
    dev_root = device_root(root, failed)

    def gpu_node(minor: int) -> dict[str, str]:
        return {"path": f"/dev/nvidia{minor}", "hostPath": str(dev_root / f"dev/nvidia{minor}")}

    def cap_node(minor: int) -> dict[str, str]:
        path = f"dev/nvidia-caps/nvidia-cap{minor}"
        return {"path": f"/{path}", "hostPath": str(dev_root / path)}

    devices: list[dict[str, Any]] = []
    every = []
    for gpu in node.gpus:
        edits = {"deviceNodes": [gpu_node(gpu.minor_number)]}
        devices.append({"name": str(gpu.index), "containerEdits": edits})
        devices.append({"name": gpu.uuid, "containerEdits": edits})
        every.append(gpu_node(gpu.minor_number))
        mig_devices = sorted((ci.device, gi.id, ci.id) for gi in (mig or {}).get(gpu.index, ()) for ci in gi.compute)
        for index, gi, ci in mig_devices:
            caps = [cap_node(mig_partition.gi_minor(gpu.minor_number, gi)),
                    cap_node(mig_partition.ci_minor(gpu.minor_number, gi, ci))]
            mig_edits = {"deviceNodes": [gpu_node(gpu.minor_number), *caps]}
            devices.append({"name": f"{gpu.index}:{index}", "containerEdits": mig_edits})
            devices.append({"name": mig_partition.mig_uuid(gpu.uuid, gi, ci), "containerEdits": mig_edits})
            every += caps
    devices.append({"name": "all", "containerEdits": {"deviceNodes": every}})
    spec: dict[str, Any] = {
        "cdiVersion": "",
        "kind": KIND,
        "devices": devices,
        "containerEdits": {
            "env": [
                "NVIDIA_VISIBLE_DEVICES=void",
                f"{STATE_ENV}={STATE_MOUNT}/{Path(NVML_STATE_FILE).name}",
            ],
            "deviceNodes": [
                {"path": f"/dev/{name}", "hostPath": str(root / f"dev/{name}")} for name in GLOBAL_DEVICES
            ],
            "mounts": [
                {"hostPath": str(root / LIBRARY), "containerPath": f"/{LIBRARY}", "options": MOUNT_OPTIONS},
                {"hostPath": str(root / LIB_DIR), "containerPath": STATE_MOUNT, "options": MOUNT_OPTIONS},
            ],
        },
    }
    spec["cdiVersion"] = minimum_version(spec)
    return spec


def minimum_version(spec: dict[str, Any]) -> str:
    """The lowest cdiVersion whose rules allow everything ``spec`` uses."""
    devices = spec.get("devices", [])
    edits = [spec.get("containerEdits", {}), *(d.get("containerEdits", {}) for d in devices)]
    if spec.get("annotations") or any(d.get("annotations") for d in devices):
        return "0.6.0"
    names_not_letters = any(d["name"] and not d["name"][0].isalpha() for d in devices)
    host_paths = any(n.get("hostPath") for e in edits for n in e.get("deviceNodes", []))
    if names_not_letters or host_paths:
        return "0.5.0"
    if any(m.get("type") for e in edits for m in e.get("mounts", [])):
        return "0.4.0"
    return "0.3.0"


def dump(spec: dict[str, Any]) -> str:
    header = "# CDI spec of a simulated NVIDIA GPU node (Mokka sim-cdi); regenerated on every stage\n"
    return header + block_yaml(spec)


def device_host_paths(spec: dict[str, Any]) -> list[str]:
    """Every device node host path the spec refers to, in order, without duplicates."""
    found: list[str] = []
    edits = [spec.get("containerEdits", {}), *(d.get("containerEdits", {}) for d in spec.get("devices", []))]
    for e in edits:
        for n in e.get("deviceNodes", []):
            path = n.get("hostPath") or n["path"]
            if path not in found:
                found.append(path)
    return found
