"""The responder speaks the shim protocol and answers like a fabric, tested without the C shim or root."""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mokka_sim_ib import mad
from mokka_sim_ib.fabric import Directory
from mokka_sim_ib.mad import Umad
from mokka_sim_ib.responder import ACK, CTL_HELLO, CTL_HELLO_ACK, CTL_MAGIC, CTL_REGISTER, HELLO, REGISTER
from mokka_sim_ib.testing import stage_node


def connect(node, hca: int = 0) -> socket.socket:  # type: ignore[no-untyped-def]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sock.settimeout(5)
    sock.connect(str(node.socket))
    sock.send(HELLO.pack(CTL_MAGIC, CTL_HELLO, 1, 0, hca))
    assert ACK.unpack(sock.recv(64)) == (CTL_MAGIC, CTL_HELLO_ACK, 0)
    sock.send(REGISTER.pack(CTL_MAGIC, CTL_REGISTER, 7, 1, mad.CLASS_OPENIB_PING, 1, 0, b"\x00\x14\x05", bytes(16)))
    return sock


def request(mgmt_class: int, attr: int, *, dlid: int, tid: int = 0x1234, timeout_ms: int = 200,
            path: list[int] | None = None) -> Umad:
    raw = bytearray(256)
    raw[0:4] = bytes([1, mgmt_class, 1, mad.GET])
    raw[8:16] = tid.to_bytes(8, "big")
    raw[16:18] = attr.to_bytes(2, "big")
    if path is not None:
        raw[7] = len(path) - 1  # hop count; path[0] is unused
        raw[mad.SMP_INITIAL_PATH:mad.SMP_INITIAL_PATH + len(path)] = bytes(path)
    if mgmt_class == mad.CLASS_OPENIB_PING:
        raw[37:40] = b"\x00\x14\x05"
    return Umad(7, 0, timeout_ms, 0, dlid, 1, 0x80010000, 0, False, bytes(16), 0, raw)


def exchange(sock: socket.socket, umad: Umad) -> Umad:
    sock.send(umad.encode())
    return Umad.decode(sock.recv(4096))


def test_ping_crosses_to_the_other_node(fabric) -> None:  # type: ignore[no-untyped-def]
    a, b = fabric("node-a"), fabric("node-b")
    with connect(a) as sock:
        reply = exchange(sock, request(mad.CLASS_OPENIB_PING, 0, dlid=b.lid(1), tid=0xABCD))
    assert reply.status == 0 and reply.method == mad.GET_RESP and reply.tid == 0xABCD and reply.agent_id == 7
    assert bytes(reply.mad[mad.VENDOR_RANGE2_DATA:]).split(b"\0")[0] == b"node-b"


def test_unknown_lid_times_out_like_the_kernel(fabric) -> None:  # type: ignore[no-untyped-def]
    a = fabric("node-a")
    with connect(a) as sock:
        reply = exchange(sock, request(mad.CLASS_OPENIB_PING, 0, dlid=0xBEEF, timeout_ms=50))
    assert reply.status == mad.ETIMEDOUT


def test_directed_route_reaches_the_partner_hca(fabric) -> None:  # type: ignore[no-untyped-def]
    a, b = fabric("node-a"), fabric("node-b")
    with connect(a, hca=1) as sock:
        local = exchange(sock, request(mad.CLASS_SMI_DIRECT, mad.ATTR_NODE_INFO, dlid=0xFFFF, path=[0]))
        remote = exchange(sock, request(mad.CLASS_SMI_DIRECT, mad.ATTR_NODE_INFO, dlid=0xFFFF, path=[0, 1]))
        desc = exchange(sock, request(mad.CLASS_SMI_DIRECT, mad.ATTR_NODE_DESC, dlid=0xFFFF, path=[0, 1]))
    node_guid = lambda u: int.from_bytes(u.mad[mad.SMP_DATA + 12:mad.SMP_DATA + 20], "big")  # noqa: E731
    assert node_guid(local) == a.config.ports[1].node_guid
    assert node_guid(remote) == b.config.ports[1].node_guid
    assert bytes(desc.mad[mad.SMP_DATA:mad.SMP_DATA + 64]).rstrip(b"\0") == b"node-b mlx5_1"


def test_port_info_carries_lid_state_and_sm(fabric) -> None:  # type: ignore[no-untyped-def]
    a = fabric("node-a")
    with connect(a) as sock:
        reply = exchange(sock, request(mad.CLASS_SMI_DIRECT, mad.ATTR_PORT_INFO, dlid=0xFFFF, path=[0]))
    data = reply.mad[mad.SMP_DATA:mad.SMP_DATA + 64]
    assert int.from_bytes(data[16:18], "big") == a.lid(0)
    assert int.from_bytes(data[18:20], "big") == 1
    assert data[32] & 0xF == 4 and data[33] >> 4 == 5  # Active, LinkUp


def test_sm_info_and_path_record(fabric) -> None:  # type: ignore[no-untyped-def]
    a, b = fabric("node-a"), fabric("node-b")
    with connect(a) as sock:
        sm = exchange(sock, request(mad.CLASS_SMI, mad.ATTR_SM_INFO, dlid=1))
        query = request(mad.CLASS_SA, mad.ATTR_PATH_RECORD, dlid=1)
        query.mad[mad.SA_DATA + 8:mad.SA_DATA + 24] = (mad_gid := (0xFE80 << 48).to_bytes(8, "big")
                                                        + b.config.ports[0].port_guid.to_bytes(8, "big"))
        path = exchange(sock, query)
    assert sm.status == 0 and sm.mad[mad.SMP_DATA + 20] & 0xF == 3  # SMINFO_MASTER
    assert mad_gid and int.from_bytes(path.mad[mad.SA_DATA + 40:mad.SA_DATA + 42], "big") == b.lid(0)


def test_failed_node_does_not_answer(fabric) -> None:  # type: ignore[no-untyped-def]
    a, b = fabric("node-a"), fabric("node-b", state="failed")
    assert b.config.ports[0].lid == 0
    with connect(a) as sock:
        reply = exchange(sock, request(mad.CLASS_SMI_DIRECT, mad.ATTR_NODE_INFO, dlid=0xFFFF, path=[0, 1],
                                       timeout_ms=50))
    assert reply.status == mad.ETIMEDOUT


def test_a_mad_it_cannot_answer_times_out_and_it_goes_on_serving(fabric) -> None:  # type: ignore[no-untyped-def]
    a, _ = fabric("node-a"), fabric("node-b")
    with connect(a) as sock:
        bad = request(mad.CLASS_SMI_DIRECT, mad.ATTR_NODE_INFO, dlid=0xFFFF, path=[0] + [1] * 63, timeout_ms=50)
        bad.mad[7] = 200  # more hops than the 64-byte initial path holds
        assert exchange(sock, bad).status == mad.ETIMEDOUT
        assert exchange(sock, request(mad.CLASS_SMI, mad.ATTR_SM_INFO, dlid=1)).status == 0


def test_static_peers_carry_pings_without_a_shared_fabric_dir(tmp_path: Path) -> None:
    nodes = [stage_node(tmp_path / name, name) for name in ("node-a", "node-b")]
    ports = []
    for _ in nodes:
        with socket.create_server(("127.0.0.1", 0)) as probe:
            ports.append(probe.getsockname()[1])
    processes = [
        subprocess.Popen([sys.executable, "-m", "mokka_sim_ib.responder_service", "--root", str(node.root),
                          "--listen", f"127.0.0.1:{mine}", "--peer", f"localhost:{other}"],
                         env={**os.environ, "MOKKA_IB_FABRIC_DIR": str(tmp_path / f"fabric-{node.name}")},
                         stdout=subprocess.DEVNULL)
        for node, mine, other in zip(nodes, ports, reversed(ports), strict=True)]
    try:
        deadline = time.monotonic() + 20
        while not all(node.socket.exists() for node in nodes):
            assert time.monotonic() < deadline and all(p.poll() is None for p in processes)
            time.sleep(0.05)
        a, b = nodes
        with connect(a) as sock:
            reply = exchange(sock, request(mad.CLASS_OPENIB_PING, 0, dlid=b.lid(1)))
        assert bytes(reply.mad[mad.VENDOR_RANGE2_DATA:]).split(b"\0")[0] == b"node-b"
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=20)
    assert [p.returncode for p in processes] == [0, 0]


def test_unknown_device_index_is_refused(fabric) -> None:  # type: ignore[no-untyped-def]
    a = fabric("node-a")
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as sock:
        sock.settimeout(5)
        sock.connect(str(a.socket))
        sock.send(HELLO.pack(CTL_MAGIC, CTL_HELLO, 1, 0, 9))
        assert ACK.unpack(sock.recv(64))[2] == 19  # ENODEV


def test_umad_header_round_trips() -> None:
    umad = request(mad.CLASS_OPENIB_PING, 0, dlid=0x1234)
    again = Umad.decode(umad.encode())
    assert (again.lid, again.agent_id, again.qpn, again.qkey, bytes(again.mad)) == (
        0x1234, 7, 1, 0x80010000, bytes(umad.mad))
    assert len(umad.encode()) == mad.UMAD_HDR.size + 256 == struct.calcsize("=64x256x")


@pytest.mark.parametrize("names", [["a", "b"], ["a", "b", "c"]])
def test_partners_pair_up_in_name_order(names: list[str]) -> None:
    from mokka_sim_ib.fabric import partner

    assert partner("a", names) == "b" and partner("b", names) == "a"
    if "c" in names:
        assert partner("c", names) is None


def test_responder_refuses_an_unstaged_root(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "mokka_sim_ib", "respond", "--root", str(tmp_path)],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 1 and "not staged" in result.stderr


def test_restaging_failed_takes_the_ports_down_without_a_restart(fabric) -> None:  # type: ignore[no-untyped-def]
    from mokka_sim_ib.testing import stage_node

    a, b = fabric("node-a"), fabric("node-b")
    healthy_lid = b.lid(0)
    stage_node(b.root, "node-b", state="failed")  # what the node daemon does on `ctl ib fail`
    time.sleep(2.1)  # peers' descriptions are cached for two seconds
    with connect(a) as sock:
        reply = exchange(sock, request(mad.CLASS_OPENIB_PING, 0, dlid=healthy_lid, timeout_ms=50))
    assert reply.status == mad.ETIMEDOUT


def test_serve_stages_runs_the_responder_and_tears_down(tmp_path: Path) -> None:
    root = tmp_path / "root"
    env = {**os.environ, "MOKKA_IB_FABRIC_DIR": str(tmp_path / "fabric")}
    serve = subprocess.Popen([sys.executable, "-m", "mokka_sim_ib", "serve", "--root", str(root), "-p", "h100",
                              "-n", "1", "--node-name", "served"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        socket_path = root / "var/lib/mokka/ib/responder.sock"
        deadline = time.monotonic() + 20
        while not socket_path.exists():
            assert serve.poll() is None and time.monotonic() < deadline, serve.stderr.read() if serve.stderr else ""
            time.sleep(0.05)
        node = type("Node", (), {"socket": socket_path})
        with connect(node) as sock:
            lid = json.loads((root / "var/lib/mokka/ib/node.json").read_text())["ports"][0]["lid"]
            reply = exchange(sock, request(mad.CLASS_OPENIB_PING, 0, dlid=lid))
        assert socket_path.stat().st_mode & 0o777 == 0o600  # its owner only (was 0666)
        assert bytes(reply.mad[mad.VENDOR_RANGE2_DATA:]).split(b"\0")[0] == b"served"
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=20)
        if serve.stderr:
            serve.stderr.close()
    assert serve.returncode == 0
    assert list(root.iterdir()) == []


def test_static_peers_are_reached_where_configured(tmp_path: Path) -> None:
    import threading

    from mokka_sim_ib.fabric import Directory, description, frame, read_message

    def describe(server: socket.socket) -> None:  # a peer that says it listens everywhere
        conn, _ = server.accept()
        with conn:
            read_message(conn, time.monotonic() + 5)
            conn.sendall(frame(description("far-node", "0.0.0.0", 18515, ())))

    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        peer_side = threading.Thread(target=describe, args=(server,))
        peer_side.start()
        (peer,) = Directory(None, [("127.0.0.1", port)], "near-node").peers()
        peer_side.join(timeout=10)
    assert (peer.address, peer.port - port) == ("127.0.0.1", 0)


def test_a_node_name_that_is_a_path_is_refused(tmp_path: Path) -> None:
    """`--node-name ../../../x/EVIL` made the responder write and delete EVIL.json outside the fabric dir."""
    fabric = tmp_path / "fabric"
    with pytest.raises(ValueError, match="DNS-1123"):
        Directory(fabric, [], "../../../x/EVIL")
    assert not (tmp_path / "x").exists()


def test_nodes_sharing_a_name_do_not_delete_each_others_fabric_file(tmp_path: Path) -> None:
    fabric = tmp_path / "fabric"
    first, second = Directory(fabric, [], "mokka-node"), Directory(fabric, [], "mokka-node")
    first.publish({"node_name": "mokka-node", "address": "127.0.0.1", "port": 1, "ports": []})
    second.publish({"node_name": "mokka-node", "address": "127.0.0.1", "port": 2, "ports": []})
    first.withdraw()  # the file is the second node's now: it stays
    assert json.loads((fabric / "mokka-node.json").read_text())["port"] == 2
    second.withdraw()
    assert not (fabric / "mokka-node.json").exists()
