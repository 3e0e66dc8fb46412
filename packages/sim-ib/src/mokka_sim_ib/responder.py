"""The long-lived MAD responder of one simulated node (``mokka-sim-ib respond``; foreground).

It stands in for the kernel's MAD layer and the fabric behind the HCAs: the shim connects every
opened ``/dev/infiniband/umad<n>`` to it, and it answers what ibping, sminfo, iblinkinfo and
ibnetdiscover send.  Shim protocol: README "Shim wire protocol"; fabric protocol: ``fabric.py``.
One thread serves everything (:mod:`.eventloop`); only what blocks on another node (asking a
static peer, relaying a ping) runs in a thread of its own while it lasts.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import socket
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import mad
from .config import NodeConfig
from .eventloop import Loop, Task, report_exception, spawn
from .fabric import IO_TIMEOUT_S, Directory, Peer, description, frame, partner, request, resolvable, unframe
from .mad import PortModel, Umad

if TYPE_CHECKING:
    import threading
    from pathlib import Path

PROGRAM = "sim-ib responder"
CTL_MAGIC = 0x42494B4D  # "MKIB" read as a little-endian u32
CTL_HELLO, CTL_REGISTER, CTL_UNREGISTER, CTL_HELLO_ACK = 1, 2, 3, 129
PROTOCOL_VERSION = 1
HELLO = struct.Struct("<IIIII")
ACK = struct.Struct("<III")
REGISTER = struct.Struct("<III4B3sx16s")
UNREGISTER = struct.Struct("<III")
PORT_UP = 4  # PortInfo:PortState ACTIVE
MAX_TIMEOUT_MS = 60_000
PING_SERVER_TIMEOUT_S = 2.0


def say(message: str) -> None:
    """One line of the responder's log, on stdout (where the node daemon's supervisor collects it)."""
    print(f"{PROGRAM}: {message}", flush=True)


class Agent:  # plain classes, not dataclasses: a service that runs on every node does not load inspect
    __slots__ = ("agent_id", "class_version", "method_mask", "mgmt_class", "oui")

    def __init__(self, agent_id: int, mgmt_class: int, class_version: int, oui: bytes, method_mask: int) -> None:
        self.agent_id = agent_id
        self.mgmt_class = mgmt_class
        self.class_version = class_version
        self.oui = oui
        self.method_mask = method_mask  # bit n: this agent serves requests of method n (a client-only agent has none)


class Client:
    """One opened umad/issm device of a tool: its socket, the HCA it opened, the agents it registered."""

    __slots__ = ("agents", "hca_index", "sock")

    def __init__(self, sock: socket.socket, hca_index: int) -> None:
        self.sock = sock
        self.hca_index = hca_index
        self.agents: dict[int, Agent] = {}


#: a group (name or gid) whose members may use the responder's socket besides its owner (the chart sets it)
SOCKET_GROUP_ENV = "MOKKA_IB_SOCKET_GROUP"


def _restrict(path: Path) -> None:
    """The socket is its owner's (0600), or its owner's and $MOKKA_IB_SOCKET_GROUP's (0660)."""
    group = os.environ.get(SOCKET_GROUP_ENV)
    if not group:
        os.chmod(path, 0o600)
        return
    import grp

    try:
        gid = int(group) if group.isdigit() else grp.getgrnam(group).gr_gid
    except KeyError:
        raise ValueError(f"{SOCKET_GROUP_ENV}={group!r}: no such group") from None
    os.chown(path, -1, gid)
    os.chmod(path, 0o660)


class Responder:
    def __init__(self, config_path: Path, socket_path: Path, listen: tuple[str, int], fabric_dir: Path | None,
                 peers: list[tuple[str, int]], loop: Loop) -> None:
        self.config_path = config_path
        self.socket_path = socket_path
        self.listen = listen
        self.loop = loop
        self._config_stamp: tuple[int, int] | None = None
        self.config = self._load_config()
        self.directory = Directory(fabric_dir, peers, self.config.node_name, say)
        self.tcp_port = 0
        self.activity = 0
        self.clients: set[Client] = set()
        self.awaiting: dict[int, Callable[[Umad], None]] = {}  # TID -> takes the answer of a ping server (ibping -S)
        self._peers_wanted: list[Callable[[list[Peer]], None]] | None = None  # while the directory is looked up

    # ---- node data -------------------------------------------------------------------------------

    def _load_config(self) -> NodeConfig:
        stat = self.config_path.stat()
        self._config_stamp = (stat.st_mtime_ns, stat.st_ino)
        return NodeConfig.load(self.config_path)

    def refresh(self) -> NodeConfig:
        """Pick up a re-staged node file (e.g. the surface was failed) without a restart."""
        with contextlib.suppress(OSError, ValueError):
            stat = self.config_path.stat()
            if (stat.st_mtime_ns, stat.st_ino) != self._config_stamp:
                self.config = self._load_config()
                self._publish()
                say(f"reloaded {self.config_path}")
        return self.config

    def _publish(self) -> None:
        self.directory.publish(description(self.config.node_name, self.listen[0], self.tcp_port, self.config.ports))

    def peers(self, then: Callable[[list[Peer]], None]) -> None:
        """Hand ``then`` the other nodes: at once from the directory's cache, else after one lookup in a thread
        (it asks static peers over TCP), shared by every task that asks meanwhile."""
        cached = self.directory.cached()
        if cached is not None:
            then(cached)
        elif self._peers_wanted is not None:
            self._peers_wanted.append(then)
        else:
            self._peers_wanted = [then]
            self.loop.in_thread(self.directory.peers, self._peers_found)

    def _peers_found(self, found: list[Peer] | None) -> None:
        wanted, self._peers_wanted = self._peers_wanted or [], None
        for then in wanted:
            self.loop.call_soon(functools.partial(then, found or []))

    def all_ports(self) -> Task[list[PortModel]]:
        ports = list(self.refresh().ports)
        peers: list[Peer] = yield self.peers
        for peer in peers:
            ports.extend(peer.ports)
        return ports

    def neighbour(self, port: PortModel) -> Task[PortModel | None]:
        peers: list[Peer] = yield self.peers
        mate = partner(port.node_name, [p.node_name for p in peers] + [self.config.node_name])
        if mate is None or port.state != PORT_UP:
            return None
        candidates = self.config.ports if mate == self.config.node_name else next(
            (p.ports for p in peers if p.node_name == mate), ())
        found = next((p for p in candidates if p.index == port.index), None)
        return found if found is not None and found.state == PORT_UP else None

    # ---- serving ---------------------------------------------------------------------------------

    def serve(self, stop: threading.Event, ready: threading.Event | None) -> None:
        """Listen on the node's socket and the fabric port, serve until ``stop`` is set, then remove what we made."""
        tcp = _listen_tcp(*self.listen)
        self.tcp_port = tcp.getsockname()[1]
        server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.socket_path.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                self.socket_path.unlink()
            server.bind(str(self.socket_path))
            _restrict(self.socket_path)
            server.listen(64)
            server.setblocking(False)
            self.loop.on_readable(server, lambda: self._accept_shim(server))
            self.loop.on_readable(tcp, lambda: self._accept_fabric(tcp))
            self._publish()
            say(f"serving {len(self.config.ports)} HCA(s) of {self.config.node_name} on {self.socket_path} and "
                f"{self.listen[0]}:{self.tcp_port}")
            if ready is not None:
                ready.set()
            self.loop.run_until(stop)
        finally:
            for client in self.clients:
                client.sock.close()
            tcp.close()
            server.close()
            with contextlib.suppress(FileNotFoundError):
                self.socket_path.unlink()
            self.directory.withdraw()

    def _accept_shim(self, server: socket.socket) -> None:
        try:
            sock, _ = server.accept()
        except OSError:
            return
        sock.setblocking(False)
        self.loop.on_readable(sock, lambda: self._greet(sock))

    def _greet(self, sock: socket.socket) -> None:
        self.loop.forget(sock)
        try:
            packet = sock.recv(4096)
        except OSError:
            packet = b""
        client = self._hello(sock, packet)
        if client is None:
            sock.close()
            return
        self.clients.add(client)
        self.loop.on_readable(sock, lambda: self._receive(client))

    def _hello(self, sock: socket.socket, packet: bytes) -> Client | None:
        status = errno.EPROTO
        index = -1
        if len(packet) == HELLO.size:
            magic, kind, version, _device_kind, index = HELLO.unpack(packet)
            if magic == CTL_MAGIC and kind == CTL_HELLO and version == PROTOCOL_VERSION:
                status = 0 if 0 <= index < len(self.refresh().ports) else errno.ENODEV
        with contextlib.suppress(OSError):
            sock.send(ACK.pack(CTL_MAGIC, CTL_HELLO_ACK, status))
        return Client(sock, index) if status == 0 else None

    def _receive(self, client: Client) -> None:
        try:
            packet = client.sock.recv(4096)
        except BlockingIOError:
            return
        except ConnectionError as exc:
            self._gone(client, exc)
            return
        if not packet:
            self._gone(client, None)
        elif len(packet) < mad.UMAD_HDR.size:
            self._control(client, packet)
        else:
            try:
                umad = Umad.decode(packet)
            except ValueError as exc:
                self._gone(client, exc)
                return
            self._mad(client, umad)

    def _gone(self, client: Client, problem: Exception | None) -> None:
        if problem is not None:
            say(f"client of {client.hca_index} gone: {problem}")
        self.loop.forget(client.sock)
        self.clients.discard(client)
        client.sock.close()

    def _control(self, client: Client, packet: bytes) -> None:
        magic, kind = struct.unpack_from("<II", packet)
        if magic != CTL_MAGIC:
            say(f"dropping a {len(packet)}-byte packet that is neither a MAD nor a control packet")
        elif kind == CTL_REGISTER and len(packet) == REGISTER.size:
            _, _, agent_id, _qpn, mgmt_class, version, _rmpp, oui, mask = REGISTER.unpack(packet)
            client.agents[agent_id] = Agent(agent_id, mgmt_class, version, oui, int.from_bytes(mask, "little"))
        elif kind == CTL_UNREGISTER and len(packet) == UNREGISTER.size:
            client.agents.pop(UNREGISTER.unpack(packet)[2], None)

    def _mad(self, client: Client, umad: Umad) -> None:
        self.activity += 1
        if umad.is_response:
            waiter = self.awaiting.pop(umad.tid, None)
            if waiter is not None:
                waiter(umad)  # a ping server on this node answered
            return
        local = self.refresh().ports[client.hca_index]

        def reply(answer: Umad | None) -> None:
            if answer is not None:
                self._send(client, answer)
            elif umad.timeout_ms > 0:  # what the kernel does with a send nothing answers
                delay = min(umad.timeout_ms * (umad.retries + 1), MAX_TIMEOUT_MS) / 1000
                self.loop.call_later(delay, lambda: self._send(client, umad.timed_out()))

        def failed(exc: Exception) -> None:  # a malformed MAD must never take the responder down
            report_exception(f"{PROGRAM}: cannot answer class 0x{umad.mgmt_class:02x} attribute 0x{umad.attr_id:04x}",
                             exc)
            reply(None)

        spawn(self.answer(local, umad), reply, failed)

    @staticmethod
    def _send(client: Client, umad: Umad) -> None:
        # never waits: a tool that stopped reading loses what its socket's queue cannot hold, and stalls no one else
        with contextlib.suppress(OSError):
            client.sock.send(umad.encode())

    # ---- what the fabric answers -----------------------------------------------------------------

    def answer(self, local: PortModel, umad: Umad) -> Task[Umad | None]:
        if umad.is_response or umad.method not in (mad.GET, mad.SET):
            return None
        if umad.mgmt_class == mad.CLASS_SMI_DIRECT:
            return (yield from self._directed_smp(local, umad))
        if local.state != PORT_UP:
            return None  # nothing leaves a port whose link is down
        if umad.mgmt_class == mad.CLASS_SMI:
            return (yield from self._lid_smp(umad))
        if umad.mgmt_class == mad.CLASS_SA and umad.lid == self.config.sm_lid:
            return (yield from self._subnet_administration(local, umad))
        if umad.mgmt_class == mad.CLASS_OPENIB_PING:
            return (yield from self._ping(local, umad))
        if umad.mgmt_class == mad.CLASS_PERF:
            return (yield from self._performance(umad))
        return None

    def _directed_smp(self, local: PortModel, umad: Umad) -> Task[Umad | None]:
        target: PortModel | None = local
        path = umad.initial_path()
        for hop in range(1, umad.hop_count + 1):
            if target is None or path[hop] != 1:
                return None
            target = yield from self.neighbour(target)
        if target is None:
            return None
        return self._smp_reply(umad, target, source_lid=0xFFFF)

    def _lid_smp(self, umad: Umad) -> Task[Umad | None]:
        if umad.lid == self.config.sm_lid and umad.attr_id == mad.ATTR_SM_INFO:
            return umad.response(mad.sm_info(self.config.sm_guid, self.activity), mad.SMP_DATA, source_lid=umad.lid)
        ports = yield from self.all_ports()
        target = next((p for p in ports if p.lid == umad.lid and p.state == PORT_UP), None)
        return None if target is None else self._smp_reply(umad, target, source_lid=target.lid)

    def _smp_reply(self, umad: Umad, target: PortModel, source_lid: int) -> Umad:
        if umad.method != mad.GET:
            return umad.response(None, 0, source_lid=source_lid, status=mad.STATUS_UNSUPPORTED_ATTRIBUTE)
        data = {
            mad.ATTR_NODE_INFO: lambda: mad.node_info(target),
            mad.ATTR_NODE_DESC: lambda: mad.node_description(target),
            mad.ATTR_PORT_INFO: lambda: mad.port_info(target, self.config.gid_prefix),
        }.get(umad.attr_id)
        if data is None or (umad.attr_id == mad.ATTR_PORT_INFO and umad.attr_mod not in (0, 1)):
            return umad.response(None, 0, source_lid=source_lid, status=mad.STATUS_UNSUPPORTED_ATTRIBUTE)
        return umad.response(data(), mad.SMP_DATA, source_lid=source_lid)

    def _performance(self, umad: Umad) -> Task[Umad | None]:
        ports = yield from self.all_ports()
        target = next((p for p in ports if p.lid == umad.lid and p.state == PORT_UP), None)
        if target is None:
            return None
        if umad.method == mad.GET and umad.attr_id == mad.ATTR_CLASS_PORT_INFO:
            return umad.response(mad.perf_class_port_info(), mad.PERF_DATA, source_lid=target.lid)
        if umad.method == mad.GET and umad.attr_id == mad.ATTR_PORT_COUNTERS:
            request = bytes(umad.mad[mad.PERF_DATA:mad.PERF_DATA + 64])
            return umad.response(mad.port_counters(request), mad.PERF_DATA, source_lid=target.lid)
        return umad.response(None, 0, source_lid=target.lid, status=mad.STATUS_UNSUPPORTED_ATTRIBUTE)

    def _subnet_administration(self, local: PortModel, umad: Umad) -> Task[Umad | None]:
        if umad.attr_id != mad.ATTR_PATH_RECORD or umad.method != mad.GET:
            return umad.response(None, 0, source_lid=umad.lid, status=mad.STATUS_UNSUPPORTED_ATTRIBUTE)
        query = bytes(umad.mad[mad.SA_DATA:mad.SA_DATA + 64])
        dguid = int.from_bytes(query[16:24], "big")
        ports = yield from self.all_ports()
        target = next((p for p in ports if p.port_guid == dguid and p.state == PORT_UP), None)
        if target is None:
            return umad.response(None, 0, source_lid=umad.lid, status=0x0300)  # SA: no records
        sgid = self.config.gid_prefix.to_bytes(8, "big") + local.port_guid.to_bytes(8, "big")
        reply = umad.response(mad.path_record(query, target.lid, local.lid, sgid), mad.SA_DATA, source_lid=umad.lid)
        reply.mad[44:46] = (0).to_bytes(2, "big")  # SA attribute offset (one record, no RMPP)
        return reply

    def _ping(self, local: PortModel, umad: Umad) -> Task[Umad | None]:
        if any(p.lid == umad.lid for p in self.config.ports):
            return (yield from self._deliver_ping(umad, local.lid))
        peers: list[Peer] = yield self.peers
        for peer in peers:
            if any(p.lid == umad.lid and p.state == PORT_UP for p in peer.ports):
                return (yield from self._relay(peer, umad, local.lid))
        return None

    def _deliver_ping(self, umad: Umad, source_lid: int) -> Task[Umad | None]:
        """A ping arriving at one of our ports: to an ``ibping -S`` there if one runs, else answered for it."""
        port = next((p for p in self.refresh().ports if p.lid == umad.lid), None)
        if port is None or port.state != PORT_UP:
            return None
        server = self._ping_server(port.index, bytes(umad.mad[37:40]))
        if server is None:
            return self._pong(umad)
        client, agent = server
        delivered = Umad(agent.agent_id, 0, 0, 0, source_lid, 1, umad.qkey, umad.sl, False, bytes(16), 0,
                         bytearray(umad.mad))
        answer: Umad | None = yield lambda then: self._ask_ping_server(client, delivered, umad.tid, then)
        if answer is None:
            return None
        # back to the requester's agent, from the port that was pinged
        return Umad(umad.agent_id, 0, 0, 0, umad.lid, answer.qpn, answer.qkey, answer.sl, False, bytes(16), 0,
                    answer.mad)

    def _ask_ping_server(self, client: Client, delivered: Umad, tid: int, then: Callable[[Umad | None], None]) -> None:
        """Hand ``delivered`` to the ping server ``client``; ``then`` takes its answer (None: none within
        PING_SERVER_TIMEOUT_S)."""
        def answered(answer: Umad) -> None:
            timer.cancel()
            then(answer)

        def silent() -> None:
            if self.awaiting.get(tid) is answered:
                del self.awaiting[tid]
                then(None)

        timer = self.loop.call_later(PING_SERVER_TIMEOUT_S, silent)
        self.awaiting[tid] = answered
        try:
            client.sock.send(delivered.encode())
        except OSError:
            timer.cancel()
            self.awaiting.pop(tid, None)
            then(None)

    def _ping_server(self, hca_index: int, oui: bytes) -> tuple[Client, Agent] | None:
        for client in self.clients:
            if client.hca_index != hca_index:
                continue
            for agent in client.agents.values():
                if agent.mgmt_class == mad.CLASS_OPENIB_PING and agent.oui == oui and agent.method_mask >> mad.GET & 1:
                    return client, agent
        return None

    def _pong(self, umad: Umad) -> Umad:
        # what `ibping -S` would answer: its host name, NUL-terminated, in the vendor data
        name = self.config.node_name.encode()[: 216 - 1] + b"\0"
        return umad.response(name, mad.VENDOR_RANGE2_DATA, source_lid=umad.lid)

    def _relay(self, peer: Peer, umad: Umad, source_lid: int) -> Task[Umad | None]:
        message = {"op": "ping", "dlid": umad.lid, "slid": source_lid, "umad": umad.encode().hex()}
        answer: dict[str, Any] | None = yield lambda then: self.loop.in_thread(lambda: _ask(peer, message), then)
        return Umad.decode(bytes.fromhex(answer["umad"])) if answer and answer.get("umad") else None

    # ---- the fabric port: other nodes' responders ------------------------------------------------

    def _accept_fabric(self, tcp: socket.socket) -> None:
        try:
            sock, _ = tcp.accept()
        except OSError:
            return
        sock.setblocking(False)
        FabricRequest(self, sock)

    def fabric_answer(self, message: dict[str, Any]) -> Task[dict[str, Any]]:
        op = message.get("op")
        if op == "describe":
            config = self.refresh()
            return description(config.node_name, self.listen[0], self.tcp_port, config.ports)
        if op == "ping":
            umad = Umad.decode(bytes.fromhex(message["umad"]))
            umad.lid = int(message["dlid"])
            pong = yield from self._deliver_ping(umad, int(message.get("slid", 0)))
            return {"umad": pong.encode().hex() if pong else None}
        return {"error": f"unknown op {op!r}"}


class FabricRequest:
    """One request of another node's responder on the fabric port: read it (within IO_TIMEOUT_S), answer, close."""

    __slots__ = ("received", "responder", "sock", "timer")

    def __init__(self, responder: Responder, sock: socket.socket) -> None:
        self.responder = responder
        self.sock = sock
        self.received = b""
        self.timer = responder.loop.call_later(IO_TIMEOUT_S, lambda: self.fail("no whole request in time"))
        responder.loop.on_readable(sock, self.readable)

    def readable(self) -> None:
        try:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError(f"closed after {len(self.received)} bytes of a request")
            self.received += chunk
            message = unframe(self.received)
        except BlockingIOError:
            return
        except (OSError, ValueError) as exc:
            self.fail(exc)
            return
        if message is not None:
            self.timer.cancel()
            self.responder.loop.forget(self.sock)
            spawn(self.responder.fabric_answer(message), self.answer, self.fail)

    def answer(self, answer: dict[str, Any]) -> None:
        # an answer (a description, a MAD) fits the socket's buffer: sending it does not wait for the peer
        with contextlib.suppress(OSError):
            self.sock.settimeout(IO_TIMEOUT_S)
            self.sock.sendall(frame(answer))
        self.sock.close()

    def fail(self, problem: object) -> None:
        say(f"fabric request failed: {problem}")
        self.timer.cancel()
        self.responder.loop.forget(self.sock)
        self.sock.close()


def _ask(peer: Peer, message: dict[str, Any]) -> dict[str, Any] | None:
    """``message``'s answer from ``peer`` (this blocks: run it in a thread); None if it cannot be had."""
    try:
        return request(peer.address, peer.port, message)
    except (OSError, ValueError) as exc:
        say(f"ping relay to {peer.node_name} failed: {exc}")
        return None


def _listen_tcp(host: str, port: int) -> socket.socket:
    """A listening socket on the first address ``host`` resolves to (the one published), non-blocking."""
    family, _, _, _, address = socket.getaddrinfo(resolvable(host) if host else None, port, type=socket.SOCK_STREAM,
                                                  flags=socket.AI_PASSIVE)[0]
    sock = socket.create_server(address, family=family, backlog=100)
    sock.setblocking(False)
    return sock


def parse_address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def run(config_path: Path, socket_path: Path, listen: tuple[str, int], fabric_dir: Path | None,
        peers: list[tuple[str, int]], stop: threading.Event, ready: threading.Event | None = None) -> None:
    """Serve until ``stop`` is set (``ready`` once serving); a bad node file fails before anything is bound."""
    loop = Loop()
    try:
        Responder(config_path, socket_path, listen, fabric_dir, peers, loop).serve(stop, ready)
    finally:
        loop.close()
        stop.set()  # ends the thread waiting for it, also when serving failed
