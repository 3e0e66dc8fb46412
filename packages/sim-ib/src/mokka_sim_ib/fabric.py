"""The layout of the InfiniBand fabric a node's HCAs are cabled into: a rail-optimised fat tree, as in a DGX SuperPOD.

Pure data from the node state, staged in the node file; the responder (``native/ib-responder/switch.c``)
builds the switches from it and from the nodes it knows, in name order (README "The fabric").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mokka_core.model.node import Node

#: Nodes per scalable unit (the leaf switches' down ports) by profile: a DGX A100 SuperPOD SU is 20
#: nodes, an H100/H200/B200 one 32; GB200/GB300 trays sit 18 to an NVL72 rack, one leaf group per rack.
SU_SIZES = {"a100": 20, "gb200": 18, "gb300": 18}
DEFAULT_SU_SIZE = 32
SWITCH_PORTS = 64  # an NVIDIA Quantum-2 QM9700 (what every switch is: native/ib-responder/switch.c)


@dataclass(frozen=True)
class FabricLayout:
    su_size: int  # nodes per scalable unit
    rails: int  # HCAs per node: one leaf per rail per scalable unit
    spines: int
    switch_guid: int  # switch n's node GUID is switch_guid + 1 + n


def layout(node: Node) -> FabricLayout:
    """The fabric of ``node``'s profile: its HCAs are the rails, one spine per rail (at most half a leaf's ports)."""
    rails = max(len(node.hcas), 1)
    spines = min(rails, SWITCH_PORTS // 2)
    prefix = int((node.infiniband.guid_prefix if node.infiniband else "a088c203").replace(":", "")[:8], 16)
    switch_guid = ((prefix & 0xFFFFFF00) | 0x04) << 32  # the HCAs' OUI, another device byte: no HCA GUID collides
    su_size = min(SU_SIZES.get(node.profile_name, DEFAULT_SU_SIZE), SWITCH_PORTS - spines)
    return FabricLayout(su_size=su_size, rails=rails, spines=spines, switch_guid=switch_guid)
