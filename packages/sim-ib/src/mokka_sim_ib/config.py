"""The responder's input: one file staged beside sysfs, so both always describe the same node.

Built from the node state by :func:`mokka_sim_ib.hca.node_config`; read by ``mokka-ib-responder``
(``native/ib-responder/node.c``).  Line-oriented and versioned, so the C program needs no JSON parser:
the format is in the package README ("The node file").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mokka_core.stage.store import IB_DIR

if TYPE_CHECKING:
    from .fabric import FabricLayout

NODE_CONFIG = f"{IB_DIR}/node.conf"
SOCKET = f"{IB_DIR}/responder.sock"
MAGIC = "mokka-ib-node 3"  # the format's name and version: the first line


class PortModel:
    """What an SMP about one CA port can report (port 1 of one HCA)."""

    __slots__ = ("cap_mask", "device_id", "hca", "index", "lid", "node_desc", "node_guid", "node_name", "phys_state",
                 "port_guid", "revision", "sm_lid", "speed_active", "speed_ext_active", "state", "vendor_id",
                 "width_active")

    def __init__(self, *, node_name: str, hca: str, index: int, node_guid: int, port_guid: int, lid: int, sm_lid: int,
                 state: int, phys_state: int, width_active: int, speed_active: int, speed_ext_active: int,
                 cap_mask: int, node_desc: str, device_id: int, revision: int, vendor_id: int) -> None:
        self.node_name = node_name
        self.hca = hca
        self.index = index
        self.node_guid = node_guid
        self.port_guid = port_guid
        self.lid = lid
        self.sm_lid = sm_lid
        self.state = state  # PortInfo:PortState
        self.phys_state = phys_state
        self.width_active = width_active
        self.speed_active = speed_active
        self.speed_ext_active = speed_ext_active
        self.cap_mask = cap_mask
        self.node_desc = node_desc
        self.device_id = device_id
        self.revision = revision
        self.vendor_id = vendor_id


#: a port's lines in the order written ("port N" first); node_desc last, the rest of its line
PORT_KEYS = ("hca", "node_guid", "port_guid", "lid", "sm_lid", "state", "phys_state", "width_active", "speed_active",
             "speed_ext_active", "cap_mask", "device_id", "revision", "vendor_id", "node_desc")
HEX_KEYS = frozenset({"node_guid", "port_guid", "gid_prefix", "sm_guid", "cap_mask", "device_id", "vendor_id",
                      "switch_guid"})
#: the fabric's layout (mokka_sim_ib.fabric.FabricLayout), after sm_guid
FABRIC_KEYS = ("su_size", "rails", "spines", "switch_guid")


def _line(key: str, value: object) -> str:
    if isinstance(value, int):
        return f"{key} {value:#x}\n" if key in HEX_KEYS else f"{key} {value}\n"
    text = str(value)
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        raise ValueError(f"{key} {text!r}: a control character cannot be staged in the node file")
    return f"{key} {text}\n"


class NodeConfig:
    __slots__ = ("fabric", "gid_prefix", "node_name", "ports", "sm_guid", "sm_lid")

    def __init__(self, node_name: str, gid_prefix: int, sm_lid: int, sm_guid: int,
                 ports: tuple[PortModel, ...], fabric: FabricLayout) -> None:
        self.node_name = node_name
        self.fabric = fabric
        self.gid_prefix = gid_prefix
        self.sm_lid = sm_lid
        self.sm_guid = sm_guid
        self.ports = ports

    def to_text(self) -> str:
        """The node file (README "The node file")."""
        lines = [f"{MAGIC}\n", _line("node_name", self.node_name), _line("gid_prefix", self.gid_prefix),
                 _line("sm_lid", self.sm_lid), _line("sm_guid", self.sm_guid),
                 *(_line(key, getattr(self.fabric, key)) for key in FABRIC_KEYS), _line("ports", len(self.ports))]
        for position, port in enumerate(self.ports):
            if port.index != position or port.node_name != self.node_name:
                raise ValueError(f"port {port.index} of {port.node_name}: ports are staged in index order, one node's")
            lines.append(f"port {port.index}\n")
            lines += [_line(key, getattr(port, key)) for key in PORT_KEYS]
        lines.append("end\n")
        return "".join(lines)
