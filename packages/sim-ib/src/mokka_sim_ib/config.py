"""The responder's input: one JSON file staged beside sysfs, so both always describe the same node.

``NODE_CONFIG`` in the ib folder of the node's state directory (format version 1)::

    {"version": 1, "node_name": "...", "gid_prefix": int, "sm_lid": 1, "sm_guid": int,
     "ports": [PortModel as a dict, one per HCA in index order]}
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mokka_core.stage.store import IB_DIR

from .hca import CAP_MASK, GID_PREFIX, MELLANOX_VENDOR_ID, PHYS_STATES, RATES, SM_LID, PortView
from .mad import PortModel

if TYPE_CHECKING:
    from mokka_core.model.node import Node

NODE_CONFIG = f"{IB_DIR}/node.json"
SOCKET = f"{IB_DIR}/responder.sock"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class NodeConfig:
    node_name: str
    gid_prefix: int
    sm_lid: int
    sm_guid: int
    ports: tuple[PortModel, ...]

    def to_json(self) -> str:
        return json.dumps({
            "version": FORMAT_VERSION, "node_name": self.node_name, "gid_prefix": self.gid_prefix,
            "sm_lid": self.sm_lid, "sm_guid": self.sm_guid, "ports": [p.to_json() for p in self.ports],
        }, indent=1) + "\n"

    @classmethod
    def load(cls, path: Path) -> NodeConfig:
        try:
            data = json.loads(path.read_text())
            if data.get("version") != FORMAT_VERSION:
                raise ValueError(f"version {data.get('version')!r}, expected {FORMAT_VERSION}")
            return cls(data["node_name"], data["gid_prefix"], data["sm_lid"], data["sm_guid"],
                       tuple(PortModel.from_json(p) for p in data["ports"]))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}: not a sim-ib node file ({exc})") from None


def node_config(node: Node, views: list[PortView]) -> NodeConfig:
    prefix = node.infiniband.guid_prefix if node.infiniband else "a088c203"
    # The subnet manager is not on any simulated host: it stands for the fabric's (unmodelled) switch.
    sm_guid = (int(prefix.replace(":", "")[:8], 16) << 32) | 0x1
    return NodeConfig(node.node_name, GID_PREFIX, SM_LID, sm_guid, tuple(_model(node.node_name, v) for v in views))


def _model(node_name: str, view: PortView) -> PortModel:
    _, _, width, speed, speed_ext = RATES[view.rate_gbps]
    return PortModel(
        node_name=node_name, hca=view.hca, index=view.index, node_guid=view.node_guid, port_guid=view.port_guid,
        lid=view.lid, sm_lid=view.sm_lid, state=view.state_number, phys_state=PHYS_STATES[view.phys_state][0],
        width_active=width, speed_active=speed, speed_ext_active=min(speed_ext, 0x8), cap_mask=CAP_MASK,
        node_desc=view.node_desc, device_id=view.pci_device_id, revision=view.hw_rev_number(),
        vendor_id=MELLANOX_VENDOR_ID,
    )
