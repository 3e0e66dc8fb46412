"""What the NRI plugin adds to a container: the decision and the adjustment, as pure functions.

For a container of an opted-in pod the adjustment is:

- one read-only bind mount of the node's staged root at ``mount_path`` (default
  ``/opt/mokka``).  A directory mount, not file mounts: the state file is
  replaced by rename on every change, and a directory bind shows the new file
  where a file bind would keep the old inode.  The mock library finds the state
  file beside itself (``dladdr``), so no variable has to name it;
- ``LD_LIBRARY_PATH`` prefixed with the mounted driver library directory, and
  ``PATH`` with the mounted ``usr/bin`` when the root has one (only keys that
  change are sent, so other plugins' keys keep their owners);
- the staged ``/dev/nvidia*`` character devices, unless the container already
  has NVIDIA devices from the device plugin (``/dev/nvidia*``, or a CDI device
  of a vendor ``nvidia.com`` or ``*.nvidia.com``: ``nvidia.com/gpu=0``,
  ``k8s.device-plugin.nvidia.com/gpu=...``) or the pod asks for none.  A
  container whose environment has ``NVIDIA_VISIBLE_DEVICES`` (the device
  plugin's ``envvar`` strategy, which the NVIDIA container runtime honours) gets
  only the GPUs it names and the control devices (:mod:`.visible`).

A pod is opted in when its namespace is listed (``*``: every namespace) or it
carries ``<opt annotation>: "true"``; it is skipped when its namespace is
excluded, it carries ``<opt annotation>: "false"``, or the container already has
a mount at ``mount_path``.

Separately, a container of a namespace in ``sysfs_namespaces`` that mounts the
host's ``/sys`` (a hostPath volume, as node-feature-discovery's worker and GPU
feature discovery have) gets the node's staged ``sys`` there instead, read-only:
on a real GPU node the host's sysfs is where such agents find the GPUs' PCI
functions, the DMI product name and the NUMA nodes, and a host that only runs a
simulated node has none of them.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...stage import paths
from ..protos import message
from . import visible

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEVICE_MODES = ("all", "annotated", "none")
#: NRI's mark on a mount (or environment key) the adjustment removes: the key with this prefix
REMOVED = "-"


@dataclass(frozen=True)
class InjectConfig:
    root: Path  # the staged node root on the host
    mount_path: str = "/opt/mokka"
    namespaces: tuple[str, ...] = ("*",)
    excluded_namespaces: tuple[str, ...] = ("kube-system",)
    opt_annotation: str = "mokka.nvidia.com/inject"
    devices_annotation: str = "mokka.nvidia.com/devices"
    devices: str = "all"  # all: unless the pod says "false"; annotated: only when it says "true"; none
    sysfs_namespaces: tuple[str, ...] = ()  # containers mounting the host's /sys get the node's (``*``: all)

    def __post_init__(self) -> None:
        if self.devices not in DEVICE_MODES:
            raise ValueError(f"devices must be one of {', '.join(DEVICE_MODES)}, got {self.devices!r}")
        if not self.mount_path.startswith("/") or self.mount_path.rstrip("/") == "":
            raise ValueError(f"mount_path must be an absolute path below /, got {self.mount_path!r}")
        if self.root.resolve() == Path("/"):
            # mounting the host's / (or its library directory) would hand the container the host's libc
            raise ValueError("root must be a staged node root (the chart's /var/lib/mokka/root), not /")


@dataclass
class Decision:
    adjustment: Any | None  # a ContainerAdjustment, or None for "leave the container alone"
    reason: str


def _flag(annotations: Any, key: str) -> str | None:
    value = annotations.get(key)
    return value.strip().lower() if isinstance(value, str) else None


def decide(pod: Any, container: Any, config: InjectConfig) -> Decision:
    """The adjustment for ``container`` of ``pod`` (NRI ``PodSandbox`` / ``Container`` messages)."""
    opt = _flag(pod.annotations, config.opt_annotation)
    if pod.namespace in config.excluded_namespaces:
        return Decision(None, f"namespace {pod.namespace} is excluded")
    if opt == "false":
        return Decision(None, f"pod opted out ({config.opt_annotation}: false)")
    inject = opt == "true" or _listed(pod.namespace, config.namespaces)
    host_sysfs = [m.destination for m in container.mounts if _host_sysfs(m)] \
        if _listed(pod.namespace, config.sysfs_namespaces) else []
    if not inject and not host_sysfs:
        return Decision(None, f"namespace {pod.namespace} is not opted in")
    if not config.root.is_dir():
        return Decision(None, f"node root {config.root} is missing (node not staged yet)")
    adjust = message("nri.pkg.api.v1alpha1.ContainerAdjustment")()
    notes = _swap_sysfs(adjust, host_sysfs, config.root)
    if inject:
        notes += _inject(adjust, pod, container, config)
    if not adjust.mounts and not adjust.env and not adjust.HasField("linux"):
        return Decision(None, ", ".join(notes))
    return Decision(adjust, "injected" + (": " + ", ".join(notes) if notes else ""))


def _listed(namespace: str, namespaces: tuple[str, ...]) -> bool:
    return "*" in namespaces or namespace in namespaces


def _host_sysfs(mount: Any) -> bool:
    """A bind mount of the host's /sys (a hostPath volume of path /sys)."""
    return os.path.normpath(mount.source or ".") == "/sys" and \
        (mount.type == "bind" or "bind" in mount.options or "rbind" in mount.options)


def _swap_sysfs(adjust: Any, destinations: list[str], root: Path) -> list[str]:
    """Each of the container's binds of the host's /sys replaced by the node's staged ``sys``."""
    if not destinations or not (root / "sys").is_dir():
        return []
    for destination in destinations:
        adjust.mounts.add(destination=REMOVED + destination)
        adjust.mounts.add(destination=destination, type="bind", source=str(root / "sys"),
                          options=["rbind", "ro", "nosuid", "nodev", "noexec"])
    return [f"the node's sysfs at {', '.join(destinations)}"]


def _inject(adjust: Any, pod: Any, container: Any, config: InjectConfig) -> list[str]:
    """The driver (root, library and PATH, devices) into ``adjust``; what was done, as notes."""
    mount_path = config.mount_path.rstrip("/")
    if any(m.destination.rstrip("/") == mount_path for m in container.mounts):
        return [f"container already has a mount at {mount_path}"]
    adjust.mounts.add(destination=mount_path, type="bind", source=str(config.root),
                      options=["rbind", "ro", "nosuid", "nodev"])
    env = dict(entry.partition("=")[::2] for entry in container.env)
    for key, value in _env_changes(env, config).items():
        adjust.env.add(key=key, value=value)
    notes = []
    asked = env.get(visible.ENV)
    if _has_nvidia_devices(container):
        if _wants_devices(pod, config) or asked is not None:
            notes.append("devices left to the device plugin")
    elif asked is not None and config.devices != "none" and \
            _flag(pod.annotations, config.devices_annotation) != "false":
        request = visible.request(asked, config.root)
        notes += _add_devices(adjust, config.root, request)
        if request.unknown:
            notes.append(f"{visible.ENV} names no GPU {', '.join(request.unknown)}")
    elif asked is None and _wants_devices(pod, config):
        notes += _add_devices(adjust, config.root, None)
    return notes


def _add_devices(adjust: Any, root: Path, request: visible.Request | None) -> list[str]:
    """The staged devices (those ``request`` wants; None: all) into ``adjust``; what was done, as notes."""
    added, skipped = device_nodes(root)
    if request is not None:
        added = [node for node in added if visible.wanted(node.path.removeprefix("/dev/"), request)]
    if added:  # an empty list would still send an (empty) linux block
        adjust.linux.devices.extend(added)
    return [f"{len(added)} devices" + (f" ({len(skipped)} not char devices skipped)" if skipped else "")]


def _env_changes(env: dict[str, str], config: InjectConfig) -> dict[str, str]:
    mount = config.mount_path.rstrip("/")
    changes = {"LD_LIBRARY_PATH": _prepend(env.get("LD_LIBRARY_PATH"), f"{mount}/{paths.LIB_DIR}")}
    if (config.root / "usr/bin").is_dir():
        changes["PATH"] = _prepend(env.get("PATH") or DEFAULT_PATH, f"{mount}/usr/bin")
    return {k: v for k, v in changes.items() if env.get(k) != v}


def _prepend(current: str | None, entry: str) -> str:
    parts = [p for p in (current or "").split(":") if p]
    return ":".join([entry, *[p for p in parts if p != entry]])


def _wants_devices(pod: Any, config: InjectConfig) -> bool:
    said = _flag(pod.annotations, config.devices_annotation)
    if config.devices == "all":
        return said != "false"
    return config.devices == "annotated" and said == "true"


def _has_nvidia_devices(container: Any) -> bool:
    devices = container.linux.devices if container.HasField("linux") else []
    return any(d.path.startswith("/dev/nvidia") for d in devices) or \
        any(_nvidia_vendor(d.name) for d in container.CDI_devices)


def _nvidia_vendor(cdi_name: str) -> bool:
    """A CDI device name's vendor (before ``/``) is NVIDIA's: ``nvidia.com`` or a subdomain of it."""
    vendor = cdi_name.partition("/")[0]
    return vendor == "nvidia.com" or vendor.endswith(".nvidia.com")


def device_nodes(root: Path) -> tuple[list[Any], list[str]]:
    """The staged ``dev/nvidia*`` character devices as NRI ``LinuxDevice`` messages, and the names skipped."""
    device = message("nri.pkg.api.v1alpha1.LinuxDevice")
    added, skipped = [], []
    try:
        names = sorted(os.listdir(root / "dev"))
    except OSError:
        return [], []
    for name in names:
        if not name.startswith("nvidia"):
            continue
        try:
            st = os.lstat(root / "dev" / name)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            continue
        if not stat.S_ISCHR(st.st_mode):
            skipped.append(name)
            continue
        node = device(path=f"/dev/{name}", type="c", major=os.major(st.st_rdev), minor=os.minor(st.st_rdev))
        node.file_mode.value = stat.S_IMODE(st.st_mode)
        node.uid.value, node.gid.value = st.st_uid, st.st_gid
        added.append(node)
    return added, skipped
