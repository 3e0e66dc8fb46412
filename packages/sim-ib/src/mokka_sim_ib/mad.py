"""Management datagrams: the kernel's ``struct ib_user_mad`` framing and the IBA attributes we answer.

Layouts follow the InfiniBand Architecture Specification vol. 1 (MAD common header 13.4.3,
SMP 14.2.1, NodeInfo 14.2.5.3, NodeDescription 14.2.5.2, PortInfo 14.2.5.6, SMInfo 14.2.5.13,
PathRecord 15.2.5.16) and <rdma/ib_user_mad.h> (header ABI 5).  All MAD fields are big-endian;
the ``ib_user_mad_hdr`` integers are host-endian except the ``__be`` ones.
"""

from __future__ import annotations

import struct

UMAD_HDR = struct.Struct("=IIIII4s4s2sBBBBBB16s4sH6s")  # struct ib_user_mad_hdr (ABI 5), 64 bytes
MAD_SIZE = 256

# management classes
CLASS_SMI = 0x01
CLASS_SMI_DIRECT = 0x81
CLASS_SA = 0x03
CLASS_PERF = 0x04
CLASS_OPENIB_PING = 0x32  # vendor range 2, OUI 00:14:05 (ibping)

# methods
GET = 0x01
SET = 0x02
GET_RESP = 0x81
RESPONSE_BIT = 0x80

# attributes
ATTR_NODE_DESC = 0x0010
ATTR_NODE_INFO = 0x0011
ATTR_PORT_INFO = 0x0015
ATTR_SM_INFO = 0x0020
ATTR_PATH_RECORD = 0x0035
ATTR_CLASS_PORT_INFO = 0x0001
ATTR_PORT_COUNTERS = 0x0012

STATUS_UNSUPPORTED_ATTRIBUTE = 0x000C  # "method/attribute combination not supported"
ETIMEDOUT = 110

SMP_DATA = 64
SMP_INITIAL_PATH = 128
VENDOR_RANGE2_DATA = 40
SA_DATA = 56
PERF_DATA = 64


class Umad:
    """One ``struct ib_user_mad`` with its 256-byte MAD."""

    # plain classes, not dataclasses: the responder runs on every node, and dataclasses bring inspect
    __slots__ = ("agent_id", "gid", "grh_present", "lid", "mad", "pkey_index", "qkey", "qpn", "retries", "sl", "status",
                 "timeout_ms")

    def __init__(self, agent_id: int, status: int, timeout_ms: int, retries: int, lid: int, qpn: int, qkey: int,
                 sl: int, grh_present: bool, gid: bytes, pkey_index: int, mad: bytearray) -> None:
        self.agent_id = agent_id
        self.status = status
        self.timeout_ms = timeout_ms
        self.retries = retries
        self.lid = lid  # destination LID on send, source LID on receive
        self.qpn = qpn
        self.qkey = qkey
        self.sl = sl
        self.grh_present = grh_present
        self.gid = gid
        self.pkey_index = pkey_index
        self.mad = mad

    @classmethod
    def decode(cls, packet: bytes) -> Umad:
        if len(packet) < UMAD_HDR.size + 24:
            raise ValueError(f"packet of {len(packet)} bytes is shorter than a MAD header")
        (agent, status, timeout, retries, _length, qpn, qkey, lid, sl, _bits, grh, _gidx, _hop, _tc, gid, _flow,
         pkey_index, _res) = UMAD_HDR.unpack_from(packet)
        mad = bytearray(packet[UMAD_HDR.size:UMAD_HDR.size + MAD_SIZE])
        mad.extend(bytes(MAD_SIZE - len(mad)))
        return cls(agent, status, timeout, retries, int.from_bytes(lid, "big"), int.from_bytes(qpn, "big"),
                   int.from_bytes(qkey, "big"), sl, bool(grh), gid, pkey_index, mad)

    def encode(self) -> bytes:
        header = UMAD_HDR.pack(
            self.agent_id, self.status, self.timeout_ms, self.retries, MAD_SIZE,
            self.qpn.to_bytes(4, "big"), self.qkey.to_bytes(4, "big"), self.lid.to_bytes(2, "big"),
            self.sl, 0, int(self.grh_present), 0, 0, 0, self.gid, bytes(4), self.pkey_index, bytes(6),
        )
        return header + bytes(self.mad)

    # common MAD header
    @property
    def mgmt_class(self) -> int:
        return self.mad[1]

    @property
    def method(self) -> int:
        return self.mad[3]

    @property
    def attr_id(self) -> int:
        return int.from_bytes(self.mad[16:18], "big")

    @property
    def attr_mod(self) -> int:
        return int.from_bytes(self.mad[20:24], "big")

    @property
    def tid(self) -> int:
        return int.from_bytes(self.mad[8:16], "big")

    @property
    def is_response(self) -> bool:
        return bool(self.method & RESPONSE_BIT)

    # directed-route SMP fields
    @property
    def hop_count(self) -> int:
        return self.mad[7]

    def initial_path(self) -> list[int]:
        return list(self.mad[SMP_INITIAL_PATH:SMP_INITIAL_PATH + 64])

    def response(self, data: bytes | None, data_offset: int, *, source_lid: int, status: int = 0) -> Umad:
        """The GetResp the requester's agent receives: same TID and agent, method | 0x80, new data."""
        mad = bytearray(self.mad)
        mad[3] = GET_RESP if self.method == GET else self.method | RESPONSE_BIT
        if self.mgmt_class == CLASS_SMI_DIRECT:
            # D bit (returning) + 15-bit status; hop pointer back at the requester
            mad[4:6] = (0x8000 | status).to_bytes(2, "big")
            mad[6] = self.hop_count + 1
        else:
            mad[4:6] = status.to_bytes(2, "big")
        if data is not None:
            mad[data_offset:data_offset + len(data)] = data
        return Umad(self.agent_id, 0, 0, 0, source_lid, self.qpn, self.qkey, self.sl, False, bytes(16),
                    self.pkey_index, mad)

    def timed_out(self) -> Umad:
        """What the kernel hands back for a request nobody answered: the request, status ETIMEDOUT."""
        return Umad(self.agent_id, ETIMEDOUT, self.timeout_ms, self.retries, self.lid, self.qpn, self.qkey, self.sl,
                    self.grh_present, self.gid, self.pkey_index, bytearray(self.mad))


class PortModel:
    """What an SMP about one CA port can report; built from staged data, or a peer's description."""

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

    def to_json(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in self.__slots__}

    @classmethod
    def from_json(cls, data: dict[str, object]) -> PortModel:
        return cls(**data)  # type: ignore[arg-type]


def node_info(port: PortModel) -> bytes:
    return b"".join([
        bytes([1, 1, 1, 1]),  # base version, class version, node type CA, one port
        port.node_guid.to_bytes(8, "big"),  # system image GUID
        port.node_guid.to_bytes(8, "big"),
        port.port_guid.to_bytes(8, "big"),
        (128).to_bytes(2, "big"),  # partition cap
        port.device_id.to_bytes(2, "big"),
        port.revision.to_bytes(4, "big"),
        bytes([1]),  # local port number the SMP arrived on
        port.vendor_id.to_bytes(3, "big"),
    ])


def node_description(port: PortModel) -> bytes:
    return port.node_desc.encode()[:64].ljust(64, b"\0")


def port_info(port: PortModel, gid_prefix: int) -> bytes:
    data = bytearray(64)
    data[8:16] = gid_prefix.to_bytes(8, "big")
    data[16:18] = port.lid.to_bytes(2, "big")
    data[18:20] = port.sm_lid.to_bytes(2, "big")
    data[20:24] = port.cap_mask.to_bytes(4, "big")
    data[28] = 1  # local port number
    data[29] = 0x03  # width enabled 1X|4X
    data[30] = 0x03  # width supported
    data[31] = port.width_active
    data[32] = (0x7 << 4) | port.state  # speeds supported SDR|DDR|QDR, port state
    data[33] = (port.phys_state << 4) | 0x2  # physical state, link-down default Polling
    data[34] = 0  # LMC 0
    data[35] = (port.speed_active << 4) | 0x7
    data[36] = (5 << 4) | 0  # neighbour MTU 4096, master SM SL 0
    data[37] = (4 << 4)  # VLCap VL0-7
    data[41] = 5  # MTUCap 4096
    data[43] = 4 << 4  # operational VLs
    data[51] = 18  # subnet timeout
    data[62] = (port.speed_ext_active << 4) | 0xF
    data[63] = 0x1F
    return bytes(data)


def sm_info(sm_guid: int, activity: int) -> bytes:
    data = bytearray(24)
    data[0:8] = sm_guid.to_bytes(8, "big")
    data[16:20] = activity.to_bytes(4, "big")
    data[20] = (15 << 4) | 3  # priority 15, SMState MASTER
    return bytes(data)


def path_record(request: bytes, dlid: int, slid: int, sgid: bytes) -> bytes:
    """A PathRecord answering ``request`` (SA data): the DGID resolved to ``dlid``."""
    record = bytearray(request[:64].ljust(64, b"\0"))
    record[24:40] = sgid
    record[40:42] = dlid.to_bytes(2, "big")
    record[42:44] = slid.to_bytes(2, "big")
    record[44:48] = (0).to_bytes(4, "big")[:3] + bytes([0xFF])  # flow label 0, hop limit 255
    record[49] = 0x80 | 1  # reversible, one path
    record[50:52] = (0xFFFF).to_bytes(2, "big")
    record[54] = (2 << 6) | 5  # exactly MTU 4096
    record[55] = (2 << 6) | 16  # exactly 100 Gb/s+ rate code
    record[56] = (2 << 6) | 18
    return bytes(record)


def perf_class_port_info() -> bytes:
    """PerfMgmt ClassPortInfo (13.4.8.1): version 1, no optional counters, response time 2^18 x 4.096 us."""
    data = bytearray(72)
    data[0:2] = bytes([1, 1])
    data[7] = 18
    return bytes(data)


def port_counters(request: bytes) -> bytes:
    """PortCounters (16.1.3.5): every counter zero, as the staged sysfs counters; PortSelect echoed."""
    data = bytearray(64)
    data[1] = request[1]
    return bytes(data)
