"""What one simulated HCA port looks like: the values every IB surface (sysfs, MADs, verbs) reports.

Pure functions of the node state.  sysfs rendering, the responder and the C shim
all read the same numbers, so ``ibstat``, ``ibv_devinfo`` and a PortInfo MAD agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mokka_core.errors import ConfigError
from mokka_core.model.identity import format_guid

from . import fabric
from .config import NodeConfig, PortModel

if TYPE_CHECKING:
    from mokka_core.model.node import Hca, Node

#: IB port states (IBA 14.2.5.6 PortInfo:PortState) as the kernel names them in ``ports/N/state``.
PORT_STATES = {"DOWN": 1, "INIT": 2, "ARMED": 3, "ACTIVE": 4, "ACTIVE_DEFER": 5}
#: Physical port states (PortInfo:PortPhysicalState) -> (number, the kernel's ``phys_state`` text).
PHYS_STATES = {
    "Sleep": (1, "Sleep"),
    "Polling": (2, "Polling"),
    "Disabled": (3, "Disabled"),
    "Training": (4, "PortConfigurationTraining"),
    "LinkUp": (5, "LinkUp"),
    "LinkErrorRecovery": (6, "LinkErrorRecovery"),
    "PhyTest": (7, "Phy Test"),
}
#: Rate in Gb/s -> (lanes, speed name, PortInfo LinkWidthActive bit, LinkSpeedActive, LinkSpeedExtActive).
#: Speed encodings: IBA PortInfo (SDR 1, DDR 2, QDR 4; extended FDR 1, EDR 2, HDR 4, NDR 8, XDR 16).
RATES = {
    10: (4, "SDR", 0x02, 0x1, 0x0),
    25: (1, "EDR", 0x01, 0x1, 0x2),
    40: (4, "QDR", 0x02, 0x4, 0x0),
    56: (4, "FDR", 0x02, 0x1, 0x1),
    100: (4, "EDR", 0x02, 0x1, 0x2),
    200: (4, "HDR", 0x02, 0x1, 0x4),
    400: (4, "NDR", 0x02, 0x1, 0x8),
    800: (4, "XDR", 0x02, 0x1, 0x10),
}
#: What a mlx5 port reports with no link: rate of a 4X SDR port, no LIDs assigned.
DOWN_RATE = 10
#: PortInfo:CapabilityMask of a ConnectX-6/7 CA port as ibstat prints it.
CAP_MASK = 0xA651E848
GID_PREFIX = 0xFE80_0000_0000_0000
SM_LID = 1
MELLANOX_VENDOR_ID = 0x02C9  # IEEE OUI in NodeInfo/ibv_devinfo (PCI vendor 15b3 is Mellanox's PCI id)
#: Counters the kernel shows under ports/N/counters (all start at zero).
COUNTERS = (
    "VL15_dropped", "excessive_buffer_overrun_errors", "link_downed", "link_error_recovery",
    "local_link_integrity_errors", "multicast_rcv_packets", "multicast_xmit_packets", "port_rcv_constraint_errors",
    "port_rcv_data", "port_rcv_errors", "port_rcv_packets", "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors", "port_xmit_constraint_errors", "port_xmit_data", "port_xmit_discards",
    "port_xmit_packets", "port_xmit_wait", "symbol_error", "unicast_rcv_packets", "unicast_xmit_packets",
)


@dataclass(frozen=True)
class PortView:
    """Port 1 of one HCA, as every tool should see it."""

    hca: str  # mlx5_<n>
    index: int
    node_guid: int
    port_guid: int
    lid: int  # 0 while the port is down
    sm_lid: int
    state: str  # DOWN ... ACTIVE_DEFER
    phys_state: str  # Polling, LinkUp, ...
    rate_gbps: int
    link_layer: str
    node_desc: str
    fw_version: str
    hw_rev: str
    board_id: str
    hca_type: str
    pci_device_id: int
    bus_id: str

    @property
    def state_number(self) -> int:
        return PORT_STATES[self.state]

    @property
    def phys_number(self) -> int:
        return PHYS_STATES[self.phys_state][0]

    def rate_text(self) -> str:
        lanes, speed, *_ = RATES[self.rate_gbps]
        return f"{self.rate_gbps} Gb/sec ({lanes}X {speed})"

    def gid_text(self) -> str:
        return f"{format_guid(GID_PREFIX)}:{format_guid(self.port_guid)}"

    def hw_rev_number(self) -> int:
        try:
            return int(self.hw_rev, 0)
        except ValueError:
            return 0


def ports(node: Node) -> list[PortView]:
    """One view per HCA; empty when the surface is disabled or the profile has no InfiniBand."""
    ib = node.infiniband
    settings = node.surface("ib")
    if ib is None or not settings.enabled:
        return []
    failed = settings.state == "failed"
    return [_port(node, hca, failed) for hca in node.hcas]


def _port(node: Node, hca: Hca, failed: bool) -> PortView:
    ib = node.infiniband
    assert ib is not None
    state = "DOWN" if failed else ib.port_state
    phys = "Polling" if failed else ib.phys_state
    link = state != "DOWN"
    try:
        node_desc = ib.node_desc_template.format(node_name=node.node_name, idx=hca.index, name=hca.name)
    except (KeyError, IndexError, ValueError) as exc:
        problem = f"bad placeholder {exc} in {ib.node_desc_template!r}; use {{node_name}}, {{idx}}, {{name}}"
        raise ConfigError(f"{node.profile_name}.yaml", [("infiniband.node_desc_template", problem)]) from None
    return PortView(
        hca=hca.name,
        index=hca.index,
        node_guid=hca.node_guid,
        port_guid=hca.port_guid,
        lid=hca.lid if link else 0,
        sm_lid=SM_LID if link else 0,
        state=state,
        phys_state=phys,
        rate_gbps=ib.rate_gbps if link else DOWN_RATE,
        link_layer=ib.link_layer,
        node_desc=node_desc[:64],
        fw_version=ib.fw_version,
        hw_rev=ib.hw_rev,
        board_id=ib.board_id,
        hca_type=ib.hca_type,
        pci_device_id=hca.device_id,
        bus_id=hca.bus_id,
    )


def node_config(node: Node, views: list[PortView]) -> NodeConfig:
    """The responder's input (``config.NODE_CONFIG``) for these ports of ``node``."""
    prefix = node.infiniband.guid_prefix if node.infiniband else "a088c203"
    # The subnet manager is not on any simulated host: it stands for the fabric's (unmodelled) UFM/SM host.
    sm_guid = (int(prefix.replace(":", "")[:8], 16) << 32) | 0x1
    return NodeConfig(node.node_name, GID_PREFIX, SM_LID, sm_guid, tuple(_model(node.node_name, v) for v in views),
                      fabric.layout(node))


def _model(node_name: str, view: PortView) -> PortModel:
    _, _, width, speed, speed_ext = RATES[view.rate_gbps]
    return PortModel(
        node_name=node_name, hca=view.hca, index=view.index, node_guid=view.node_guid, port_guid=view.port_guid,
        lid=view.lid, sm_lid=view.sm_lid, state=view.state_number, phys_state=PHYS_STATES[view.phys_state][0],
        width_active=width, speed_active=speed, speed_ext_active=min(speed_ext, 0x8), cap_mask=CAP_MASK,
        node_desc=view.node_desc, device_id=view.pci_device_id, revision=view.hw_rev_number(),
        vendor_id=MELLANOX_VENDOR_ID,
    )
