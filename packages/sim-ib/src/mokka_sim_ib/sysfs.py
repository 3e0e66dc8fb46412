"""Render the HCAs as the kernel's RDMA core shows them in sysfs and /dev, in its exact formats.

Layout (relative to the root), as on a real host: the class entries are links into the
PCI function's directory, whose attributes sim-pci renders from the same node state::

    sys/devices/<rc>/<bdf>/infiniband/mlx5_<n>/            node_guid fw_ver ... ports/1/...
    sys/devices/<rc>/<bdf>/infiniband/mlx5_<n>/device   -> ../../../<bdf>
    sys/devices/<rc>/<bdf>/infiniband_verbs/uverbs<n>/     ibdev abi_version dev device
    sys/devices/<rc>/<bdf>/infiniband_mad/{umad,issm}<n>/  ibdev port dev device
    sys/class/infiniband/mlx5_<n>      -> ../../devices/<rc>/<bdf>/infiniband/mlx5_<n>
    sys/class/infiniband_verbs/uverbs<n>, sys/class/infiniband_mad/{umad,issm}<n>: likewise
    sys/class/infiniband_verbs/abi_version, sys/class/infiniband_mad/abi_version
    dev/infiniband/uverbs<n> (231:192+n), umad<n> (231:n), issm<n> (231:64+n)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mokka_core.model.identity import format_guid
from mokka_core.stage.surface import CharDevice, Dir, Entry, File, Symlink

from .hca import CAP_MASK, COUNTERS, PHYS_STATES, PortView

if TYPE_CHECKING:
    from mokka_core.model.node import Node

#: The RDMA core's char-device major and the minor bases of its three device kinds.
RDMA_MAJOR = 231
UMAD_MINOR_BASE = 0
ISSM_MINOR_BASE = 64
UVERBS_MINOR_BASE = 192
#: ABI versions the kernel reports (ib_user_mad.h, ib_user_verbs.h; uverbs<n>/abi_version is the driver's).
MAD_ABI_VERSION = 5
VERBS_ABI_VERSION = 6
MLX5_ABI_VERSION = 1
PORT = 1

CLASS_IB = "sys/class/infiniband"
CLASS_MAD = "sys/class/infiniband_mad"
CLASS_VERBS = "sys/class/infiniband_verbs"
DEV_DIR = "dev/infiniband"


def device_entries(node: Node, views: list[PortView]) -> list[Entry]:
    if not views:
        return []
    roots = {hca.name: hca.root_complex for hca in node.hcas}
    entries: list[Entry] = [
        Dir(CLASS_IB), Dir(CLASS_MAD), Dir(CLASS_VERBS), Dir(DEV_DIR),
        File(f"{CLASS_MAD}/abi_version", f"{MAD_ABI_VERSION}\n", mode=0o444),
        File(f"{CLASS_VERBS}/abi_version", f"{VERBS_ABI_VERSION}\n", mode=0o444),
    ]
    for view in views:
        function = f"sys/devices/{roots[view.hca]}/{view.bus_id}"
        entries += _ib_device(function, view)
        entries += _char_class(function, "infiniband_verbs", f"uverbs{view.index}", UVERBS_MINOR_BASE + view.index,
                               {"ibdev": view.hca, "abi_version": str(MLX5_ABI_VERSION)})
        for kind, base in (("umad", UMAD_MINOR_BASE), ("issm", ISSM_MINOR_BASE)):
            entries += _char_class(function, "infiniband_mad", f"{kind}{view.index}", base + view.index,
                                   {"ibdev": view.hca, "port": str(PORT)})
    return entries


def _ib_device(function: str, view: PortView) -> list[Entry]:
    base = f"{function}/infiniband/{view.hca}"
    port = f"{base}/ports/{PORT}"
    attrs = {
        "node_type": "1: CA",
        "node_guid": format_guid(view.node_guid),
        "sys_image_guid": format_guid(view.node_guid),
        "fw_ver": view.fw_version,
        "hw_rev": view.hw_rev,
        "board_id": view.board_id,
        "hca_type": view.hca_type,
        "node_desc": view.node_desc,
    }
    port_attrs = {
        "state": f"{view.state_number}: {view.state}",
        "phys_state": f"{view.phys_number}: {PHYS_STATES[view.phys_state][1]}",
        "rate": view.rate_text(),
        "lid": f"0x{view.lid:x}",
        "lid_mask_count": "0",
        "sm_lid": f"0x{view.sm_lid:x}",
        "sm_sl": "0",
        "cap_mask": f"0x{CAP_MASK:08x}",
        "link_layer": view.link_layer,
        "gids/0": view.gid_text(),
        "pkeys/0": "0xffff",
        "gid_attrs/types/0": "IB/RoCE v1",
    }
    entries: list[Entry] = [Dir(base), Dir(f"{base}/ports"), Dir(port), Dir(f"{port}/counters")]
    entries += [File(f"{base}/{name}", value + "\n", mode=0o444) for name, value in attrs.items()]
    entries += [File(f"{port}/{name}", value + "\n", mode=0o444) for name, value in port_attrs.items()]
    entries += [File(f"{port}/counters/{name}", "0\n", mode=0o444) for name in COUNTERS]
    entries.append(Symlink(f"{base}/device", f"../../../{view.bus_id}"))
    entries.append(Symlink(f"{CLASS_IB}/{view.hca}", f"../../devices/{_after_sys_devices(base)}"))
    return entries


def _char_class(function: str, cls: str, name: str, minor: int, attrs: dict[str, str]) -> list[Entry]:
    base = f"{function}/{cls}/{name}"
    entries: list[Entry] = [Dir(base)]
    entries += [File(f"{base}/{attr}", value + "\n", mode=0o444) for attr, value in attrs.items()]
    entries.append(File(f"{base}/dev", f"{RDMA_MAJOR}:{minor}\n", mode=0o444))
    entries.append(Symlink(f"{base}/device", f"../../../{function.rsplit('/', 1)[1]}"))
    entries.append(Symlink(f"sys/class/{cls}/{name}", f"../../devices/{_after_sys_devices(base)}"))
    # the kernel's modes (rdma-core's udev rules): verbs for every user, umad/issm (raw MADs, SM) for root
    mode = 0o666 if cls == "infiniband_verbs" else 0o600
    entries.append(CharDevice(f"{DEV_DIR}/{name}", RDMA_MAJOR, minor, mode=mode))
    return entries


def _after_sys_devices(path: str) -> str:
    return path.removeprefix("sys/devices/")
