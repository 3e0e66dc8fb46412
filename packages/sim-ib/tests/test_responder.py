"""The responder (mokka-ib-responder) speaks the shim protocol and answers like a fabric, tested without the C
shim or root: these tests are its clients, on its Unix socket and its TCP port."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mokka_sim_ib.responder import command
from mokka_sim_ib.testing import SimNode, stage_node, start_responder, stop_responder

# ---- the wire, as the README's "Shim wire protocol" and <rdma/ib_user_mad.h> (ABI 5) spell it -------------
UMAD_HDR = struct.Struct("=IIIII4s4s2sBBBBBB16s4sH6s")  # struct ib_user_mad_hdr, 64 bytes
CTL_MAGIC, CTL_HELLO, CTL_REGISTER, CTL_UNREGISTER, CTL_HELLO_ACK = 0x42494B4D, 1, 2, 3, 129
HELLO, ACK, REGISTER = struct.Struct("<IIIII"), struct.Struct("<III"), struct.Struct("<III4B3sx16s")
CLASS_SMI, CLASS_SA, CLASS_PERF, CLASS_PING, CLASS_SMI_DIRECT = 0x01, 0x03, 0x04, 0x32, 0x81
GET, GET_RESP = 0x01, 0x81
NODE_DESC, NODE_INFO, PORT_COUNTERS, PORT_INFO, SM_INFO, PATH_RECORD = 0x10, 0x11, 0x12, 0x15, 0x20, 0x35
SWITCH_INFO = 0x12  # in the SM classes (PORT_COUNTERS is PerfMgmt's)
SMP_DATA, SA_DATA, PERF_DATA, VENDOR_DATA, INITIAL_PATH = 64, 56, 64, 40, 128
ETIMEDOUT, ENODEV = 110, 19
PING_OUI = b"\x00\x14\x05"


class Umad:
    """One ``struct ib_user_mad`` with its 256-byte MAD."""

    def __init__(self, agent_id: int, status: int, timeout_ms: int, lid: int, qpn: int, qkey: int, mad: bytearray,
                 pkey_index: int = 0) -> None:
        self.agent_id, self.status, self.timeout_ms, self.lid = agent_id, status, timeout_ms, lid
        self.qpn, self.qkey, self.mad, self.pkey_index = qpn, qkey, mad, pkey_index

    @classmethod
    def decode(cls, packet: bytes) -> Umad:
        agent, status, timeout, _, _, qpn, qkey, lid, *_, pkey, _ = UMAD_HDR.unpack_from(packet)
        return cls(agent, status, timeout, int.from_bytes(lid, "big"), int.from_bytes(qpn, "big"),
                   int.from_bytes(qkey, "big"), bytearray(packet[64:320]), pkey)

    def encode(self) -> bytes:
        return UMAD_HDR.pack(self.agent_id, self.status, self.timeout_ms, 0, 256, self.qpn.to_bytes(4, "big"),
                             self.qkey.to_bytes(4, "big"), self.lid.to_bytes(2, "big"), 0, 0, 0, 0, 0, 0, bytes(16),
                             bytes(4), self.pkey_index, bytes(6)) + bytes(self.mad)

    @property
    def method(self) -> int:
        return self.mad[3]

    @property
    def tid(self) -> int:
        return int.from_bytes(self.mad[8:16], "big")

    def data(self, offset: int, size: int = 64) -> bytes:
        return bytes(self.mad[offset:offset + size])


def connect(node: SimNode, hca: int = 0, method_mask: bytes = bytes(16)) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sock.settimeout(5)
    sock.connect(str(node.socket))
    sock.send(HELLO.pack(CTL_MAGIC, CTL_HELLO, 1, 0, hca))
    assert ACK.unpack(sock.recv(64)) == (CTL_MAGIC, CTL_HELLO_ACK, 0)
    sock.send(REGISTER.pack(CTL_MAGIC, CTL_REGISTER, 7, 1, CLASS_PING, 1, 0, PING_OUI, method_mask))
    return sock


def request(mgmt_class: int, attr: int, *, dlid: int, tid: int = 0x1234, timeout_ms: int = 200,
            path: list[int] | None = None, method: int = GET, modifier: int = 0) -> Umad:
    raw = bytearray(256)
    raw[0:4] = bytes([1, mgmt_class, 1, method])
    raw[8:16] = tid.to_bytes(8, "big")
    raw[16:18] = attr.to_bytes(2, "big")
    raw[20:24] = modifier.to_bytes(4, "big")
    if path is not None:
        raw[7] = len(path) - 1  # hop count; path[0] is unused
        raw[INITIAL_PATH:INITIAL_PATH + len(path)] = bytes(path)
    if mgmt_class == CLASS_PING:
        raw[37:40] = PING_OUI
    return Umad(7, 0, timeout_ms, dlid, 1, 0x80010000, raw, pkey_index=3)


def exchange(sock: socket.socket, umad: Umad) -> Umad:
    sock.send(umad.encode())
    return Umad.decode(sock.recv(4096))


def pong_name(reply: Umad) -> bytes:
    return bytes(reply.mad[VENDOR_DATA:]).split(b"\0")[0]


def fabric_request(port: int, message: bytes, *, framed: bool = True) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(struct.pack(">I", len(message)) + message if framed else message)
        sock.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    return received


def published(fabric_dir: Path, node: SimNode) -> dict:  # type: ignore[type-arg]
    return json.loads((fabric_dir / f"{node.name}.json").read_text())


# ---- serving -------------------------------------------------------------------------------------------------

def test_ping_crosses_to_the_other_node(fabric) -> None:  # type: ignore[no-untyped-def]
    a, b = fabric("node-a"), fabric("node-b")
    with connect(a) as sock:
        reply = exchange(sock, request(CLASS_PING, 0, dlid=b.lid(1), tid=0xABCD))
    assert reply.status == 0 and reply.method == GET_RESP and reply.tid == 0xABCD and reply.agent_id == 7
    assert pong_name(reply) == b"node-b"


def test_a_reply_carries_the_requests_agent_queue_pair_and_key(fabric) -> None:  # type: ignore[no-untyped-def]
    a = fabric("node-a")
    with connect(a) as sock:
        reply = exchange(sock, request(CLASS_PING, 0, dlid=a.lid(0)))
    assert (reply.agent_id, reply.qpn, reply.qkey, reply.pkey_index, reply.lid) == (7, 1, 0x80010000, 3, a.lid(0))
    assert pong_name(reply) == b"node-a"


def test_unknown_lid_times_out_like_the_kernel(fabric) -> None:  # type: ignore[no-untyped-def]
    a = fabric("node-a")
    with connect(a) as sock:
        sent = request(CLASS_PING, 0, dlid=0xBEEF, timeout_ms=50)
        reply = exchange(sock, sent)
    assert reply.status == ETIMEDOUT and bytes(reply.mad) == bytes(sent.mad) and reply.timeout_ms == 50


def test_directed_route_reaches_the_leaf_then_the_other_hca(fabric) -> None:  # type: ignore[no-untyped-def]
    """README "The fabric": mlx5_1 of the first node (by name) is on port 1 of leaf su01-leaf-r1, the next on port 2."""
    a, b = fabric("node-a"), fabric("node-b")
    with connect(a, hca=1) as sock:
        local = exchange(sock, request(CLASS_SMI_DIRECT, NODE_INFO, dlid=0xFFFF, path=[0]))
        leaf = exchange(sock, request(CLASS_SMI_DIRECT, NODE_INFO, dlid=0xFFFF, path=[0, 1]))
        leaf_desc = exchange(sock, request(CLASS_SMI_DIRECT, NODE_DESC, dlid=0xFFFF, path=[0, 1]))
        remote = exchange(sock, request(CLASS_SMI_DIRECT, NODE_INFO, dlid=0xFFFF, path=[0, 1, 2]))
        desc = exchange(sock, request(CLASS_SMI_DIRECT, NODE_DESC, dlid=0xFFFF, path=[0, 1, 2]))
    node_guid = lambda u: int.from_bytes(u.data(SMP_DATA + 12, 8), "big")  # noqa: E731
    assert node_guid(local) == a.config.ports[1].node_guid
    # NodeInfo (IBA 14.2.5.3): NodeType 2 (switch), 64 ports (QM9700), LocalPortNum = the port it came in by
    info = leaf.data(SMP_DATA, 40)
    assert (info[2], info[3], info[36]) == (2, 64, 1)
    assert int.from_bytes(info[30:32], "big") == 0xD2F2 and int.from_bytes(info[37:40], "big") == 0x02C9
    assert leaf_desc.data(SMP_DATA).rstrip(b"\0") == b"MF0;su01-leaf-r1:MQM9700/U1"
    assert node_guid(remote) == b.config.ports[1].node_guid
    assert desc.data(SMP_DATA).rstrip(b"\0") == b"node-b mlx5_1"
    assert int.from_bytes(remote.mad[4:6], "big") == 0x8000 and remote.mad[6] == 3  # returning, status 0


def test_leaves_go_up_to_every_spine(fabric) -> None:  # type: ignore[no-untyped-def]
    """h100: 32 nodes per scalable unit, 8 rails, 8 spines; leaf port 33 + k goes up to spine k's port leaf + 1."""
    a = fabric("node-a", gpus=8)
    with connect(a, hca=3) as sock:
        spine = exchange(sock, request(CLASS_SMI_DIRECT, NODE_INFO, dlid=0xFFFF, path=[0, 1, 33 + 5]))
        spine_desc = exchange(sock, request(CLASS_SMI_DIRECT, NODE_DESC, dlid=0xFFFF, path=[0, 1, 33 + 5]))
        other_leaf = exchange(sock, request(CLASS_SMI_DIRECT, NODE_DESC, dlid=0xFFFF, path=[0, 1, 38, 8]))
        back = exchange(sock, request(CLASS_SMI_DIRECT, NODE_DESC, dlid=0xFFFF, path=[0, 1, 38, 8, 1]))
        switch_info = exchange(sock, request(CLASS_SMI_DIRECT, SWITCH_INFO, dlid=0xFFFF, path=[0, 1]))
        port0 = exchange(sock, request(CLASS_SMI_DIRECT, PORT_INFO, dlid=0xFFFF, path=[0, 1], modifier=0))
        unused = exchange(sock, request(CLASS_SMI_DIRECT, PORT_INFO, dlid=0xFFFF, path=[0, 1], modifier=2))
        nowhere = exchange(sock, request(CLASS_SMI_DIRECT, NODE_INFO, dlid=0xFFFF, path=[0, 1, 2], timeout_ms=50))
        through_ca = exchange(sock, request(CLASS_SMI_DIRECT, NODE_INFO, dlid=0xFFFF, path=[0, 1, 1, 1], timeout_ms=50))
    assert spine.data(SMP_DATA, 40)[36] == 4  # leaf (unit 0, rail 3) is spine port 4
    assert spine_desc.data(SMP_DATA).rstrip(b"\0") == b"MF0;spine-06:MQM9700/U1"
    assert other_leaf.data(SMP_DATA).rstrip(b"\0") == b"MF0;su01-leaf-r7:MQM9700/U1"
    assert back.data(SMP_DATA).rstrip(b"\0") == b"node-a mlx5_7"
    assert switch_info.data(SMP_DATA)[16] & 0x08  # SwitchInfo (IBA 14.2.5.4): EnhancedPort0
    # the switch's LID is on port 0 (spines first: 2..9, then leaf unit*8 + rail: 10 + 3)
    assert int.from_bytes(port0.data(SMP_DATA)[16:18], "big") == 13 and port0.data(SMP_DATA)[32] & 0xF == 4
    assert unused.data(SMP_DATA)[32] & 0xF == 1 and unused.data(SMP_DATA)[33] >> 4 == 2  # Down, Polling
    assert unused.data(SMP_DATA)[28] == 1  # LocalPortNum: where the SMP came in
    assert nowhere.status == ETIMEDOUT
    assert through_ca.status == ETIMEDOUT  # back at node-a's HCA: a CA forwards no SMP


def test_a_switch_answers_lid_routed_smps_on_its_lid(fabric) -> None:  # type: ignore[no-untyped-def]
    a = fabric("node-a")  # h100 x2: 2 rails, 2 spines (LIDs 2, 3), leaves (unit 0, rail r) at LIDs 4 + r
    with connect(a) as sock:
        spine = exchange(sock, request(CLASS_SMI, NODE_DESC, dlid=3))
        leaf = exchange(sock, request(CLASS_SMI, NODE_INFO, dlid=5))
        beyond = exchange(sock, request(CLASS_SMI, NODE_INFO, dlid=6, timeout_ms=50))
    assert spine.data(SMP_DATA).rstrip(b"\0") == b"MF0;spine-02:MQM9700/U1" and spine.lid == 3
    assert leaf.data(SMP_DATA, 40)[2] == 2 and leaf.lid == 5
    assert beyond.status == ETIMEDOUT


def test_the_nineteenth_tray_is_in_the_second_scalable_unit(fabric, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """gb200: 18 trays per unit, 4 rails, 4 spines. Eighteen more nodes (their fabric entries only: SMPs need
    nothing else) put the last one, by name, on port 1 of su02's leaves, reached over a spine's port 4 + 1."""
    a = fabric("node-a", profile="gb200", gpus=4)
    entry = published(tmp_path / "fabric", a)
    for i in range(18):
        name = f"node-b{i:02d}"
        ports = [{**port, "node_name": name, "node_desc": f"{name} {port['hca']}", "lid": 0x3000 + 4 * i + n,
                  "node_guid": port["node_guid"] + (i + 1) * 0x1000, "port_guid": port["port_guid"] + (i + 1) * 0x1000}
                 for n, port in enumerate(entry["ports"])]
        (tmp_path / "fabric" / f"{name}.json").write_text(json.dumps({**entry, "node_name": name, "ports": ports}))
    time.sleep(2.5)  # entries are read again at most every 2 s
    with connect(a, hca=2) as sock:
        path = [0, 1, 18 + 1, 4 + 2 + 1]  # leaf su01-r2, up to spine-01, down to leaf 1 * 4 + 2 (su02-leaf-r2)
        leaf = exchange(sock, request(CLASS_SMI_DIRECT, NODE_DESC, dlid=0xFFFF, path=path))
        last = exchange(sock, request(CLASS_SMI_DIRECT, NODE_DESC, dlid=0xFFFF, path=[*path, 1]))
        empty = exchange(sock, request(CLASS_SMI_DIRECT, NODE_DESC, dlid=0xFFFF, path=[*path, 2], timeout_ms=50))
        info = exchange(sock, request(CLASS_SMI_DIRECT, NODE_INFO, dlid=0xFFFF, path=path))
        lid = exchange(sock, request(CLASS_SMI_DIRECT, PORT_INFO, dlid=0xFFFF, path=path, modifier=0))
    assert leaf.data(SMP_DATA).rstrip(b"\0") == b"MF0;su02-leaf-r2:MQM9700/U1"
    assert last.data(SMP_DATA).rstrip(b"\0") == b"node-b17 mlx5_2"
    assert empty.status == ETIMEDOUT
    assert info.data(SMP_DATA, 40)[36] == 18 + 1  # came in from spine-01 on its first up port
    assert int.from_bytes(lid.data(SMP_DATA)[16:18], "big") == 2 + 4 + 4 + 2  # spines, unit 0's leaves, rail 2


@pytest.mark.parametrize("names", [["a", "b"], ["c", "a", "b"]])
def test_nodes_take_their_leaf_ports_in_name_order(fabric, names: list[str]) -> None:  # type: ignore[no-untyped-def]
    nodes = {name: fabric(f"node-{name}") for name in names}
    for asking in nodes.values():
        with connect(asking) as sock:
            for port, name in enumerate([*sorted(names), None], start=1):
                reply = exchange(sock, request(CLASS_SMI_DIRECT, NODE_DESC, dlid=0xFFFF, path=[0, 1, port],
                                               timeout_ms=50))
                if name is None:
                    assert reply.status == ETIMEDOUT
                else:
                    assert reply.data(SMP_DATA).rstrip(b"\0") == f"node-{name} mlx5_0".encode()


def test_port_info_carries_lid_state_and_sm(fabric) -> None:  # type: ignore[no-untyped-def]
    a = fabric("node-a")
    with connect(a) as sock:
        reply = exchange(sock, request(CLASS_SMI_DIRECT, PORT_INFO, dlid=0xFFFF, path=[0]))
    data = reply.data(SMP_DATA)
    assert int.from_bytes(data[16:18], "big") == a.lid(0)
    assert int.from_bytes(data[18:20], "big") == 1
    assert data[32] & 0xF == 4 and data[33] >> 4 == 5  # Active, LinkUp


def test_lid_routed_smp_and_perf_reach_the_other_node(fabric) -> None:  # type: ignore[no-untyped-def]
    a, b = fabric("node-a"), fabric("node-b")
    with connect(a) as sock:
        info = exchange(sock, request(CLASS_SMI, NODE_INFO, dlid=b.lid(1)))
        unsupported = exchange(sock, request(CLASS_SMI, 0x0019, dlid=b.lid(1)))
        counters_query = request(CLASS_PERF, PORT_COUNTERS, dlid=b.lid(1))
        counters_query.mad[PERF_DATA + 1] = 1
        counters = exchange(sock, counters_query)
        class_info = exchange(sock, request(CLASS_PERF, 0x0001, dlid=b.lid(1)))
    assert int.from_bytes(info.data(SMP_DATA + 20, 8), "big") == b.config.ports[1].port_guid
    assert info.lid == b.lid(1) and int.from_bytes(unsupported.mad[4:6], "big") == 0x000C
    assert counters.data(PERF_DATA) == bytes([0, 1]) + bytes(62) and counters.lid == b.lid(1)
    assert class_info.data(PERF_DATA, 8) == bytes([1, 1, 0, 0, 0, 0, 0, 18])


def test_sm_info_and_path_record(fabric) -> None:  # type: ignore[no-untyped-def]
    a, b = fabric("node-a"), fabric("node-b")
    with connect(a) as sock:
        sm = exchange(sock, request(CLASS_SMI, SM_INFO, dlid=1))
        query = request(CLASS_SA, PATH_RECORD, dlid=1)
        query.mad[SA_DATA + 8:SA_DATA + 24] = (0xFE80 << 48).to_bytes(8, "big") + b.config.ports[0].port_guid.to_bytes(
            8, "big")
        path = exchange(sock, query)
        query.mad[SA_DATA + 16:SA_DATA + 24] = (1).to_bytes(8, "big")
        none = exchange(sock, query)
    assert sm.status == 0 and sm.data(SMP_DATA + 20, 1)[0] & 0xF == 3  # SMINFO_MASTER
    assert int.from_bytes(sm.data(SMP_DATA, 8), "big") == a.config.sm_guid
    assert int.from_bytes(path.data(SA_DATA + 40, 2), "big") == b.lid(0)
    assert int.from_bytes(path.data(SA_DATA + 42, 2), "big") == a.lid(0)
    assert path.data(SA_DATA + 32, 8) == a.config.ports[0].port_guid.to_bytes(8, "big")  # the SGID's GUID
    assert int.from_bytes(none.mad[4:6], "big") == 0x0300  # SA: no records


def test_failed_node_does_not_answer(fabric) -> None:  # type: ignore[no-untyped-def]
    a, b = fabric("node-a"), fabric("node-b", state="failed")
    assert b.config.ports[0].lid == 0
    with connect(a) as sock:  # its leaf port is down (node-b is the second node by name: port 2)
        reply = exchange(sock, request(CLASS_SMI_DIRECT, NODE_INFO, dlid=0xFFFF, path=[0, 1, 2], timeout_ms=50))
        port = exchange(sock, request(CLASS_SMI_DIRECT, PORT_INFO, dlid=0xFFFF, path=[0, 1], modifier=2))
    assert reply.status == ETIMEDOUT
    assert port.data(SMP_DATA)[32] & 0xF == 1 and port.data(SMP_DATA)[33] >> 4 == 2  # Down, Polling
    with connect(b) as sock:  # only its own directed-route answers, nothing leaves it
        assert exchange(sock, request(CLASS_SMI_DIRECT, NODE_INFO, dlid=0xFFFF, path=[0])).status == 0
        leaf = request(CLASS_SMI_DIRECT, NODE_INFO, dlid=0xFFFF, path=[0, 1], timeout_ms=50)
        assert exchange(sock, leaf).status == ETIMEDOUT
        assert exchange(sock, request(CLASS_SMI, SM_INFO, dlid=1, timeout_ms=50)).status == ETIMEDOUT
        assert exchange(sock, request(CLASS_PING, 0, dlid=a.lid(0), timeout_ms=50)).status == ETIMEDOUT


def test_a_mad_it_cannot_answer_times_out_and_it_goes_on_serving(fabric) -> None:  # type: ignore[no-untyped-def]
    a, _ = fabric("node-a"), fabric("node-b")
    with connect(a) as sock:
        bad = request(CLASS_SMI_DIRECT, NODE_INFO, dlid=0xFFFF, path=[0] + [1] * 63, timeout_ms=50)
        bad.mad[7] = 200  # more hops than the 64-byte initial path holds
        assert exchange(sock, bad).status == ETIMEDOUT
        assert exchange(sock, request(CLASS_SMI, SM_INFO, dlid=1)).status == 0


def test_ping_server_answers_pings_to_its_port(fabric) -> None:  # type: ignore[no-untyped-def]
    """ibping -S: a client that registered a ping agent serving GET gets the pings, and its answer goes back."""
    a, b = fabric("node-a"), fabric("node-b")
    with connect(b, hca=1, method_mask=(1 << GET).to_bytes(16, "little")) as server, connect(a) as client:
        client.send(request(CLASS_PING, 0, dlid=b.lid(1), tid=0x77).encode())
        delivered = Umad.decode(server.recv(4096))
        assert delivered.tid == 0x77 and delivered.lid == a.lid(0) and delivered.agent_id == 7
        answer = Umad(7, 0, 0, delivered.lid, 1, 0x80010000, bytearray(delivered.mad))
        answer.mad[3] = GET_RESP
        answer.mad[VENDOR_DATA:VENDOR_DATA + 7] = b"server\0"
        server.send(answer.encode())
        reply = Umad.decode(client.recv(4096))
    assert reply.tid == 0x77 and pong_name(reply) == b"server" and reply.lid == b.lid(1)


def test_unknown_device_index_is_refused(fabric) -> None:  # type: ignore[no-untyped-def]
    a = fabric("node-a")
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as sock:
        sock.settimeout(5)
        sock.connect(str(a.socket))
        sock.send(HELLO.pack(CTL_MAGIC, CTL_HELLO, 1, 0, 9))
        assert ACK.unpack(sock.recv(64))[2] == ENODEV


# ---- untrusted input: the Unix socket, the TCP port ----------------------------------------------------------

GARBAGE = [b"\0", b"MKIB", struct.pack("<II", CTL_MAGIC, 77), struct.pack("<II", CTL_MAGIC, CTL_REGISTER),
           struct.pack("<III", CTL_MAGIC, CTL_UNREGISTER, 12345), b"x" * 63, b"\xff" * 64, b"\xff" * 87, b"\xff" * 88,
           bytes(4000), os.urandom(320), os.urandom(1000)]


def test_garbage_on_the_unix_socket_is_dropped_and_it_goes_on_answering(fabric) -> None:  # type: ignore[no-untyped-def]
    a = fabric("node-a")
    for hello in (b"", b"garbage", HELLO.pack(CTL_MAGIC, CTL_HELLO, 2, 0, 0), os.urandom(20)):  # bad greetings
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as sock:
            sock.settimeout(5)
            sock.connect(str(a.socket))
            sock.send(hello)
            answer = sock.recv(64)  # an empty packet reads as the end of the connection: closed, no answer
            assert (ACK.unpack(answer)[2] == 71) if hello else answer == b""  # EPROTO
    with connect(a) as sock:
        for packet in GARBAGE:
            sock.send(packet)
        sock.settimeout(0.3)
        with pytest.raises(TimeoutError):  # a garbage MAD may time out later; drain what came
            while True:
                sock.recv(4096)
        sock.settimeout(5)
        assert pong_name(exchange(sock, request(CLASS_PING, 0, dlid=a.lid(0), tid=0xFEED))) == b"node-a"
    assert a.process is not None and a.process.poll() is None


def test_garbage_on_the_tcp_port_is_dropped_and_it_goes_on_answering(fabric) -> None:  # type: ignore[no-untyped-def]
    fabric_dir = fabric("node-a").root.parent / "fabric"
    a = fabric.nodes[0]  # type: ignore[attr-defined]
    port = published(fabric_dir, a)["port"]
    for message in (b"", b"\xff\xff\xff\xff", b"{", b"[1, 2]", b'"x"', b'{"op": 1}', b'{"op": "ping"}',
                    b'{"op": "ping", "dlid": 70000, "umad": "00"}', b'{"op": "ping", "dlid": 1, "umad": "zz"}',
                    b'{"op": "ping", "dlid": 1, "umad": "' + b"0" * 100 + b'"}', b"[" * 5000 + b"]" * 5000,
                    b'{"a": "\\ud800\\u0000"}', os.urandom(200)):
        fabric_request(port, message)
    fabric_request(port, struct.pack(">I", 10) + b"{}", framed=False)  # shorter than it says
    fabric_request(port, struct.pack(">I", 2) + b"{}{}", framed=False)  # longer
    answer = fabric_request(port, b'{"op": "describe"}')
    assert json.loads(answer[4:])["node_name"] == "node-a" and int.from_bytes(answer[:4], "big") == len(answer) - 4
    assert json.loads(fabric_request(port, b'{"op": "nothing"}')[4:]) == {"error": "unknown op 'nothing'"}
    with connect(a) as sock:
        assert pong_name(exchange(sock, request(CLASS_PING, 0, dlid=a.lid(0)))) == b"node-a"
    assert a.process is not None and a.process.poll() is None


def test_a_relayed_ping_is_answered_over_tcp(fabric) -> None:  # type: ignore[no-untyped-def]
    fabric_dir = fabric("node-b").root.parent / "fabric"
    b = fabric.nodes[0]  # type: ignore[attr-defined]
    ping = request(CLASS_PING, 0, dlid=b.lid(0), tid=0x42)
    message = {"op": "ping", "dlid": b.lid(0), "slid": 5, "umad": ping.encode().hex()}
    answer = json.loads(fabric_request(published(fabric_dir, b)["port"], json.dumps(message).encode())[4:])
    reply = Umad.decode(bytes.fromhex(answer["umad"]))
    assert reply.tid == 0x42 and pong_name(reply) == b"node-b"
    message["dlid"] = 0xBEEF
    assert json.loads(fabric_request(published(fabric_dir, b)["port"], json.dumps(message).encode())[4:]) == {
        "umad": None}


# ---- the fabric: static peers, the directory -------------------------------------------------------------

def free_ports(count: int) -> list[int]:
    ports = []
    for _ in range(count):
        with socket.create_server(("127.0.0.1", 0)) as probe:
            ports.append(probe.getsockname()[1])
    return ports


def test_static_peers_carry_pings_without_a_shared_fabric_dir(tmp_path: Path) -> None:
    nodes = [stage_node(tmp_path / name, name) for name in ("node-a", "node-b")]
    ports = free_ports(2)
    for node, mine, other in zip(nodes, ports, reversed(ports), strict=True):
        start_responder(node, tmp_path / f"fabric-{node.name}", "--listen", f"127.0.0.1:{mine}", "--peer",
                        f"localhost:{other}")
    try:
        a, b = nodes
        with connect(a) as sock:
            reply = exchange(sock, request(CLASS_PING, 0, dlid=b.lid(1)))
        assert pong_name(reply) == b"node-b"
    finally:
        for node in nodes:
            stop_responder(node)
    assert [node.process.returncode for node in nodes if node.process] == [0, 0]


def test_static_peers_are_reached_where_configured(tmp_path: Path) -> None:
    """A peer that says it listens everywhere (0.0.0.0:18515) is asked where --peer said, not there."""
    far = stage_node(tmp_path / "far", "far-node").config.ports[0]
    port_entry = {key: getattr(far, key) for key in far.__slots__}
    asked: list[dict] = []  # type: ignore[type-arg]

    def peer_side(server: socket.socket) -> None:
        server.settimeout(20)
        while len(asked) < 2:
            conn, _ = server.accept()
            with conn:
                size = int.from_bytes(conn.recv(4, socket.MSG_WAITALL), "big")
                message = json.loads(conn.recv(size, socket.MSG_WAITALL))
                asked.append(message)
                if message["op"] == "describe":
                    answer = {"node_name": "far-node", "address": "0.0.0.0", "port": 18515, "ports": [port_entry]}
                else:
                    ping = Umad.decode(bytes.fromhex(message["umad"]))
                    ping.mad[3] = GET_RESP
                    ping.mad[VENDOR_DATA:VENDOR_DATA + 4] = b"far\0"
                    answer = {"umad": ping.encode().hex()}
                body = json.dumps(answer).encode()
                conn.sendall(len(body).to_bytes(4, "big") + body)

    near = stage_node(tmp_path / "near", "near-node")
    with socket.create_server(("127.0.0.1", 0)) as server:
        thread = threading.Thread(target=peer_side, args=(server,))
        thread.start()
        start_responder(near, tmp_path / "fabric", "--peer", f"127.0.0.1:{server.getsockname()[1]}")
        try:
            with connect(near) as sock:
                reply = exchange(sock, request(CLASS_PING, 0, dlid=far.lid))
        finally:
            stop_responder(near)
            thread.join(timeout=20)
    assert [m["op"] for m in asked] == ["describe", "ping"] and asked[1]["dlid"] == far.lid
    assert pong_name(reply) == b"far"


def test_nodes_sharing_a_name_do_not_delete_each_others_fabric_file(tmp_path: Path) -> None:
    fabric_dir = tmp_path / "fabric"
    first = start_responder(stage_node(tmp_path / "one", "mokka-node"), fabric_dir)
    first_port = published(fabric_dir, first)["port"]
    second = stage_node(tmp_path / "two", "mokka-node")
    start_responder(second, fabric_dir)
    second_port = published(fabric_dir, second)["port"]
    assert first_port != second_port
    stop_responder(first)  # the file is the second node's now: it stays
    assert published(fabric_dir, second)["port"] == second_port
    stop_responder(second)
    assert not (fabric_dir / "mokka-node.json").exists()


def test_sigterm_removes_what_it_made_and_exits_0(fabric) -> None:  # type: ignore[no-untyped-def]
    a = fabric("node-a")
    fabric_dir = a.root.parent / "fabric"
    assert (fabric_dir / "node-a.json").stat().st_mode & 0o777 == 0o600
    assert a.socket.stat().st_mode & 0o777 == 0o600
    stop_responder(a)
    assert a.process is not None and a.process.returncode == 0
    assert not a.socket.exists() and not (fabric_dir / "node-a.json").exists()
    assert sorted(p.name for p in a.socket.parent.iterdir()) == ["node.conf"]


def test_socket_group_opens_the_socket_to_a_group(tmp_path: Path) -> None:
    node = stage_node(tmp_path / "n", "node-a")
    gid = os.getgid()
    os.environ["MOKKA_IB_SOCKET_GROUP"] = str(gid)
    try:
        start_responder(node, tmp_path / "fabric")
    finally:
        del os.environ["MOKKA_IB_SOCKET_GROUP"]
    try:
        info = node.socket.stat()
        assert info.st_mode & 0o777 == 0o660 and info.st_gid == gid
    finally:
        stop_responder(node)
    result = subprocess.run(command(node.root), env={**os.environ, "MOKKA_IB_SOCKET_GROUP": "no-such-group-here"},
                            capture_output=True, text=True, timeout=10)
    assert result.returncode == 1 and "MOKKA_IB_SOCKET_GROUP='no-such-group-here': no such group" in result.stderr
    assert not node.socket.exists()


# ---- the node file -----------------------------------------------------------------------------------------

def test_responder_refuses_an_unstaged_root(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "mokka_sim_ib", "respond", "--root", str(tmp_path)],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 1 and "not staged" in result.stderr
    assert not (tmp_path / "var/lib/mokka/ib/responder.sock").exists()


def test_restaging_failed_takes_the_ports_down_without_a_restart(fabric) -> None:  # type: ignore[no-untyped-def]
    a, b = fabric("node-a"), fabric("node-b")
    healthy_lid = b.lid(0)
    stage_node(b.root, "node-b", state="failed")  # what the node daemon does on `ctl ib fail`
    time.sleep(2.1)  # peers' descriptions are cached for two seconds
    with connect(a) as sock:
        reply = exchange(sock, request(CLASS_PING, 0, dlid=healthy_lid, timeout_ms=50))
    assert reply.status == ETIMEDOUT


def test_a_node_name_that_is_a_path_is_refused(tmp_path: Path) -> None:
    """`--node-name ../../../x/EVIL` made the responder write and delete EVIL.json outside the fabric dir."""
    node = stage_node(tmp_path / "n", "node-a")
    node_file = node.root / "var/lib/mokka/ib/node.conf"
    node_file.write_text(node_file.read_text().replace("node_name node-a", "node_name ../../../x/EVIL"))
    result = subprocess.run([*command(node.root), "--fabric-dir", str(tmp_path / "fabric")], capture_output=True,
                            text=True, timeout=10)
    assert result.returncode == 1 and "DNS-1123" in result.stderr and str(node_file) in result.stderr
    assert not (tmp_path / "x").exists() and not node.socket.exists() and not (tmp_path / "fabric").exists()


def test_serve_stages_runs_the_responder_and_tears_down(tmp_path: Path) -> None:
    root = tmp_path / "root"
    env = {**os.environ, "MOKKA_IB_FABRIC_DIR": str(tmp_path / "fabric")}
    serve = subprocess.Popen([sys.executable, "-m", "mokka_sim_ib", "serve", "--root", str(root), "-p", "h100",
                              "-n", "1", "--node-name", "served"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        node = SimNode("served", root, stage_node(tmp_path / "same", "served", gpus=1).config)
        deadline = time.monotonic() + 20
        while not node.socket.exists():
            assert serve.poll() is None and time.monotonic() < deadline, serve.stderr.read() if serve.stderr else ""
            time.sleep(0.05)
        with connect(node) as sock:
            reply = exchange(sock, request(CLASS_PING, 0, dlid=node.lid(0)))
        assert node.socket.stat().st_mode & 0o777 == 0o600  # its owner only (was 0666)
        assert pong_name(reply) == b"served"
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=20)
        if serve.stderr:
            serve.stderr.close()
    assert serve.returncode == 0
    assert list(root.iterdir()) == []


# ---- who may hold the shim's socket (SO_PEERCRED) -------------------------------------------------------
NOBODY = 65534  # nobody:nogroup
OTHER_USER = r"""
import resource, socket, struct, sys
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
path, count = sys.argv[1], int(sys.argv[2])
held, greeted = [], 0
for _ in range(count):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(5)
    try:
        s.connect(path)
        s.send(struct.pack("<IIIII", 0x42494B4D, 1, 1, 0, 0))
        ack = s.recv(64)
    except OSError:
        s.close()
        continue
    if len(ack) == 12 and struct.unpack("<III", ack)[2] == 0:  # greeted: now hold an agent, never idle
        s.send(struct.pack("<III4B3sx16s", 0x42494B4D, 2, 1, 1, 0x32, 1, 0, b"\0\x14\x05", bytes(16)))
        greeted += 1
    held.append(s)
print(greeted, flush=True)
sys.stdin.read()
"""


@pytest.fixture
def group_node(monkeypatch: pytest.MonkeyPatch) -> Iterator[SimNode]:
    """A served node whose socket lets group nogroup in ($MOKKA_IB_SOCKET_GROUP), under a directory others reach."""
    if os.geteuid() != 0:
        pytest.skip("needs root to connect as another user")
    base = Path(tempfile.mkdtemp(prefix="mokka-ib-"))
    base.chmod(0o755)
    monkeypatch.setenv("MOKKA_IB_SOCKET_GROUP", str(NOBODY))
    node = start_responder(stage_node(base / "n", "node-a"), base / "fabric")
    try:
        yield node
    finally:
        stop_responder(node)
        shutil.rmtree(base)


def test_another_user_cannot_exhaust_the_connections_the_nodes_tools_need(group_node: SimNode) -> None:
    """A user the socket's group lets in holds at most 64 connections; root's (the node's tools) still get served."""
    with subprocess.Popen(["/usr/bin/python3", "-c", OTHER_USER, str(group_node.socket), "1100"], user=NOBODY,
                          group=NOBODY, extra_groups=[], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True) as other:
        try:
            assert other.stdout is not None
            assert int(other.stdout.readline()) == 64
            with connect(group_node) as sock:
                reply = exchange(sock, request(CLASS_PING, 0, dlid=group_node.lid(0)))
            assert pong_name(reply) == b"node-a"
        finally:
            other.kill()


def test_a_connection_that_never_says_hello_is_closed(group_node: SimNode) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as idle:
        idle.settimeout(10)
        idle.connect(str(group_node.socket))
        started = time.monotonic()
        assert idle.recv(64) == b""  # closed by the responder
        assert 1.5 < time.monotonic() - started < 8


OTHER_USER_TCP = r"""
import socket, sys, time
port, count = int(sys.argv[1]), int(sys.argv[2])
held = []
for _ in range(count):
    try:
        held.append(socket.create_connection(("127.0.0.1", port), timeout=5))
    except OSError:
        pass
time.sleep(0.5)
still_open = 0
for s in held:
    s.setblocking(False)
    try:
        still_open += s.recv(1) != b""  # b"": the responder closed it
    except BlockingIOError:
        still_open += 1
    except OSError:
        pass
print(still_open, flush=True)
sys.stdin.read()
"""


def test_another_local_user_cannot_take_the_fabric_port(fabric, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The TCP port is reachable by every local user: one holds at most 16 connections; the nodes' requests go on."""
    if os.geteuid() != 0:
        pytest.skip("needs root to connect as another user")
    a = fabric("node-a")
    port = published(tmp_path / "fabric", a)["port"]
    with subprocess.Popen(["/usr/bin/python3", "-c", OTHER_USER_TCP, str(port), "300"], user=NOBODY, group=NOBODY,
                          extra_groups=[], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as other:
        try:
            assert other.stdout is not None
            assert int(other.stdout.readline()) == 16
            answer = fabric_request(port, json.dumps({"op": "describe"}).encode())
            assert json.loads(answer[4:])["node_name"] == "node-a"
        finally:
            other.kill()
