"""The long-lived MAD responder of one simulated node (``mokka-sim-ib respond``; foreground).

It stands in for the kernel's MAD layer and the fabric behind the HCAs: the shim connects every
opened ``/dev/infiniband/umad<n>`` to it, and it answers what ibping, sminfo, iblinkinfo and
ibnetdiscover send.  Shim protocol: README "Shim wire protocol"; fabric protocol: ``fabric.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import socket
import struct
import threading
from dataclasses import dataclass, field
from pathlib import Path

from . import mad
from .config import NodeConfig
from .fabric import Directory, Peer, description, frame, partner, read_message, request
from .mad import PortModel, Umad

log = logging.getLogger("mokka-sim-ib.responder")

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


@dataclass
class Agent:
    agent_id: int
    mgmt_class: int
    class_version: int
    oui: bytes
    method_mask: int  # bit n: this agent serves requests of method n (a client-only agent has none)


@dataclass(eq=False)
class Client:
    sock: socket.socket
    hca_index: int
    agents: dict[int, Agent] = field(default_factory=dict)


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
                 peers: list[tuple[str, int]]) -> None:
        self.config_path = config_path
        self.socket_path = socket_path
        self.listen = listen
        self._config_stamp: tuple[int, int] | None = None
        self.config = self._load_config()
        self.directory = Directory(fabric_dir, peers, self.config.node_name)
        self.tcp_port = 0
        self.activity = 0
        self.clients: set[Client] = set()
        self.awaiting: dict[int, asyncio.Future[Umad]] = {}  # TID -> the answer of a ping server (ibping -S)
        self.ready = asyncio.Event()

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
                log.info("reloaded %s", self.config_path)
        return self.config

    def _publish(self) -> None:
        self.directory.publish(description(self.config.node_name, self.listen[0], self.tcp_port, self.config.ports))

    async def all_ports(self) -> list[PortModel]:
        ports = list(self.refresh().ports)
        for peer in await self.directory.peers():
            ports.extend(peer.ports)
        return ports

    async def neighbour(self, port: PortModel) -> PortModel | None:
        peers = await self.directory.peers()
        mate = partner(port.node_name, [p.node_name for p in peers] + [self.config.node_name])
        if mate is None or port.state != PORT_UP:
            return None
        candidates = self.config.ports if mate == self.config.node_name else next(
            (p.ports for p in peers if p.node_name == mate), ())
        found = next((p for p in candidates if p.index == port.index), None)
        return found if found is not None and found.state == PORT_UP else None

    # ---- serving ---------------------------------------------------------------------------------

    async def serve(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        tcp = await asyncio.start_server(self._tcp_client, self.listen[0], self.listen[1])
        self.tcp_port = tcp.sockets[0].getsockname()[1]
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        server.bind(str(self.socket_path))
        _restrict(self.socket_path)
        server.listen(64)
        server.setblocking(False)
        self._publish()
        log.info("serving %d HCA(s) of %s on %s and %s:%d", len(self.config.ports), self.config.node_name,
                 self.socket_path, self.listen[0], self.tcp_port)
        self.ready.set()
        accept = asyncio.ensure_future(self._accept_loop(loop, server))
        try:
            await stop.wait()
        finally:
            accept.cancel()
            tcp.close()
            server.close()
            with contextlib.suppress(FileNotFoundError):
                self.socket_path.unlink()
            self.directory.withdraw()

    async def _accept_loop(self, loop: asyncio.AbstractEventLoop, server: socket.socket) -> None:
        tasks = set()
        while True:
            sock, _ = await loop.sock_accept(server)
            sock.setblocking(False)
            task = asyncio.ensure_future(self._client(loop, sock))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    async def _client(self, loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
        with sock:
            packet = await loop.sock_recv(sock, 4096)
            client = self._hello(sock, packet)
            if client is None:
                return
            pending: set[asyncio.Task[None]] = set()
            self.clients.add(client)
            try:
                while packet := await loop.sock_recv(sock, 4096):
                    if len(packet) < mad.UMAD_HDR.size:
                        self._control(client, packet)
                        continue
                    task = asyncio.ensure_future(self._handle(loop, client, Umad.decode(packet)))
                    pending.add(task)
                    task.add_done_callback(pending.discard)
            except (ConnectionError, ValueError) as exc:
                log.info("client of %s gone: %s", client.hca_index, exc)
            finally:
                self.clients.discard(client)
                for task in pending:
                    task.cancel()

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

    def _control(self, client: Client, packet: bytes) -> None:
        magic, kind = struct.unpack_from("<II", packet)
        if magic != CTL_MAGIC:
            log.warning("dropping a %d-byte packet that is neither a MAD nor a control packet", len(packet))
        elif kind == CTL_REGISTER and len(packet) == REGISTER.size:
            _, _, agent_id, _qpn, mgmt_class, version, _rmpp, oui, mask = REGISTER.unpack(packet)
            client.agents[agent_id] = Agent(agent_id, mgmt_class, version, oui, int.from_bytes(mask, "little"))
        elif kind == CTL_UNREGISTER and len(packet) == UNREGISTER.size:
            client.agents.pop(UNREGISTER.unpack(packet)[2], None)

    async def _handle(self, loop: asyncio.AbstractEventLoop, client: Client, umad: Umad) -> None:
        self.activity += 1
        if umad.is_response:
            waiter = self.awaiting.get(umad.tid)
            if waiter is not None and not waiter.done():
                waiter.set_result(umad)  # a ping server on this node answered
            return
        local = self.refresh().ports[client.hca_index]
        try:
            reply = await self.answer(local, umad)
        except Exception:  # a malformed MAD must never take the responder down
            log.exception("cannot answer class 0x%02x attribute 0x%04x", umad.mgmt_class, umad.attr_id)
            reply = None
        if reply is None:
            if umad.is_response or umad.timeout_ms == 0:
                return
            await asyncio.sleep(min(umad.timeout_ms * (umad.retries + 1), MAX_TIMEOUT_MS) / 1000)
            reply = umad.timed_out()
        with contextlib.suppress(OSError):
            await loop.sock_sendall(client.sock, reply.encode())

    # ---- what the fabric answers -----------------------------------------------------------------

    async def answer(self, local: PortModel, umad: Umad) -> Umad | None:
        if umad.is_response or umad.method not in (mad.GET, mad.SET):
            return None
        if umad.mgmt_class == mad.CLASS_SMI_DIRECT:
            return await self._directed_smp(local, umad)
        if local.state != PORT_UP:
            return None  # nothing leaves a port whose link is down
        if umad.mgmt_class == mad.CLASS_SMI:
            return await self._lid_smp(local, umad)
        if umad.mgmt_class == mad.CLASS_SA and umad.lid == self.config.sm_lid:
            return await self._subnet_administration(local, umad)
        if umad.mgmt_class == mad.CLASS_OPENIB_PING:
            return await self._ping(local, umad)
        if umad.mgmt_class == mad.CLASS_PERF:
            return await self._performance(umad)
        return None

    async def _directed_smp(self, local: PortModel, umad: Umad) -> Umad | None:
        target: PortModel | None = local
        path = umad.initial_path()
        for hop in range(1, umad.hop_count + 1):
            if target is None or path[hop] != 1:
                return None
            target = await self.neighbour(target)
        if target is None:
            return None
        return self._smp_reply(umad, target, source_lid=0xFFFF)

    async def _lid_smp(self, local: PortModel, umad: Umad) -> Umad | None:
        if umad.lid == self.config.sm_lid and umad.attr_id == mad.ATTR_SM_INFO:
            return umad.response(mad.sm_info(self.config.sm_guid, self.activity), mad.SMP_DATA, source_lid=umad.lid)
        target = next((p for p in await self.all_ports() if p.lid == umad.lid and p.state == PORT_UP), None)
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

    async def _performance(self, umad: Umad) -> Umad | None:
        target = next((p for p in await self.all_ports() if p.lid == umad.lid and p.state == PORT_UP), None)
        if target is None:
            return None
        if umad.method == mad.GET and umad.attr_id == mad.ATTR_CLASS_PORT_INFO:
            return umad.response(mad.perf_class_port_info(), mad.PERF_DATA, source_lid=target.lid)
        if umad.method == mad.GET and umad.attr_id == mad.ATTR_PORT_COUNTERS:
            request = bytes(umad.mad[mad.PERF_DATA:mad.PERF_DATA + 64])
            return umad.response(mad.port_counters(request), mad.PERF_DATA, source_lid=target.lid)
        return umad.response(None, 0, source_lid=target.lid, status=mad.STATUS_UNSUPPORTED_ATTRIBUTE)

    async def _subnet_administration(self, local: PortModel, umad: Umad) -> Umad | None:
        if umad.attr_id != mad.ATTR_PATH_RECORD or umad.method != mad.GET:
            return umad.response(None, 0, source_lid=umad.lid, status=mad.STATUS_UNSUPPORTED_ATTRIBUTE)
        query = bytes(umad.mad[mad.SA_DATA:mad.SA_DATA + 64])
        dguid = int.from_bytes(query[16:24], "big")
        target = next((p for p in await self.all_ports() if p.port_guid == dguid and p.state == PORT_UP), None)
        if target is None:
            return umad.response(None, 0, source_lid=umad.lid, status=0x0300)  # SA: no records
        sgid = self.config.gid_prefix.to_bytes(8, "big") + local.port_guid.to_bytes(8, "big")
        reply = umad.response(mad.path_record(query, target.lid, local.lid, sgid), mad.SA_DATA, source_lid=umad.lid)
        reply.mad[44:46] = (0).to_bytes(2, "big")  # SA attribute offset (one record, no RMPP)
        return reply

    async def _ping(self, local: PortModel, umad: Umad) -> Umad | None:
        if any(p.lid == umad.lid for p in self.config.ports):
            return await self._deliver_ping(umad, local.lid)
        for peer in await self.directory.peers():
            if any(p.lid == umad.lid and p.state == PORT_UP for p in peer.ports):
                return await self._relay(peer, umad, local.lid)
        return None

    async def _deliver_ping(self, umad: Umad, source_lid: int) -> Umad | None:
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
        waiter: asyncio.Future[Umad] = asyncio.get_running_loop().create_future()
        self.awaiting[umad.tid] = waiter
        try:
            await asyncio.get_running_loop().sock_sendall(client.sock, delivered.encode())
            answer = await asyncio.wait_for(waiter, PING_SERVER_TIMEOUT_S)
        except (TimeoutError, OSError):
            return None
        finally:
            self.awaiting.pop(umad.tid, None)
        # back to the requester's agent, from the port that was pinged
        return Umad(umad.agent_id, 0, 0, 0, umad.lid, answer.qpn, answer.qkey, answer.sl, False, bytes(16), 0,
                    answer.mad)

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

    async def _relay(self, peer: Peer, umad: Umad, source_lid: int) -> Umad | None:
        try:
            message = {"op": "ping", "dlid": umad.lid, "slid": source_lid, "umad": umad.encode().hex()}
            answer = await request(peer.address, peer.port, message)
        except (TimeoutError, OSError, ValueError, asyncio.IncompleteReadError) as exc:
            log.info("ping relay to %s failed: %s", peer.node_name, exc)
            return None
        return Umad.decode(bytes.fromhex(answer["umad"])) if answer.get("umad") else None

    async def _tcp_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            message = await asyncio.wait_for(read_message(reader), 5)
            if message.get("op") == "describe":
                config = self.refresh()
                answer = description(config.node_name, self.listen[0], self.tcp_port, config.ports)
            elif message.get("op") == "ping":
                umad = Umad.decode(bytes.fromhex(message["umad"]))
                umad.lid = int(message["dlid"])
                pong = await self._deliver_ping(umad, int(message.get("slid", 0)))
                answer = {"umad": pong.encode().hex() if pong else None}
            else:
                answer = {"error": f"unknown op {message.get('op')!r}"}
            writer.write(frame(answer))
            await writer.drain()
        except (TimeoutError, OSError, ValueError, KeyError, asyncio.IncompleteReadError) as exc:
            log.info("fabric request failed: %s", exc)
        finally:
            writer.close()


def parse_address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def run(config_path: Path, socket_path: Path, listen: tuple[str, int], fabric_dir: Path | None,
        peers: list[tuple[str, int]], stop: threading.Event, ready: threading.Event | None = None) -> None:
    """Serve until ``stop`` is set (``ready`` once serving); a bad node file fails before anything is bound."""
    responder = Responder(config_path, socket_path, listen, fabric_dir, peers)

    async def main() -> None:
        stopped = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.run_in_executor(None, stop.wait).add_done_callback(lambda _: stopped.set())

        async def mark_ready() -> None:
            await responder.ready.wait()
            if ready is not None:
                ready.set()

        marking = asyncio.ensure_future(mark_ready())
        try:
            await responder.serve(stopped)
        finally:
            marking.cancel()
            stop.set()  # ends the thread waiting for it, also when serving failed

    asyncio.run(main())
