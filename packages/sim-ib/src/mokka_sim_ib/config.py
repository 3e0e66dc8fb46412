"""The responder's input: one JSON file staged beside sysfs, so both always describe the same node.

Built from the node state by :func:`mokka_sim_ib.hca.node_config`; read by the responder.

``NODE_CONFIG`` in the ib folder of the node's state directory (format version 1)::

    {"version": 1, "node_name": "...", "gid_prefix": int, "sm_lid": 1, "sm_guid": int,
     "ports": [PortModel as a dict, one per HCA in index order]}
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from mokka_core.stage.store import IB_DIR

from .mad import PortModel

if TYPE_CHECKING:
    from pathlib import Path

NODE_CONFIG = f"{IB_DIR}/node.json"
SOCKET = f"{IB_DIR}/responder.sock"
FORMAT_VERSION = 1


class NodeConfig:
    __slots__ = ("gid_prefix", "node_name", "ports", "sm_guid", "sm_lid")

    def __init__(self, node_name: str, gid_prefix: int, sm_lid: int, sm_guid: int,
                 ports: tuple[PortModel, ...]) -> None:
        self.node_name = node_name
        self.gid_prefix = gid_prefix
        self.sm_lid = sm_lid
        self.sm_guid = sm_guid
        self.ports = ports

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
