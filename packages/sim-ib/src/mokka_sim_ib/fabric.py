"""Responders of different nodes find each other and carry pings between them.

Discovery: every responder writes ``<fabric dir>/<node name>.json`` (its TCP address and its
ports, the :class:`~mokka_sim_ib.mad.PortModel` fields) and reads the others' files; responders
given ``--peer HOST:PORT`` ask those for the same description over TCP instead.

TCP protocol (one request per connection): a 4-byte big-endian length, then a UTF-8 JSON object;
the answer is framed the same way.

- ``{"op": "describe"}`` -> ``{"node_name": str, "address": str, "port": int, "ports": [PortModel]}``
- ``{"op": "ping", "dlid": int, "slid": int, "umad": hex}`` (the requester's ib_user_mad) ->
  ``{"umad": hex}`` (the GetResp to deliver: from an ``ibping -S`` on that port if one is registered,
  else the responder's own) or ``{"umad": null}`` (no such port, it is down, or its server is silent)

Cabling: no switches are modelled.  Nodes are paired in name order (1st with 2nd, 3rd with 4th,
...), and HCA ``mlx5_<i>`` of one node is cabled to ``mlx5_<i>`` of its partner.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mokka_core.model.names import node_name_problem
from mokka_core.stage.store import atomic_write

from .mad import PortModel

if TYPE_CHECKING:
    from pathlib import Path

LENGTH = struct.Struct(">I")
MAX_MESSAGE = 1 << 20
IO_TIMEOUT_S = 5.0
PEER_CACHE_S = 2.0
WILDCARDS = ("", "0.0.0.0", "::")


class Peer:
    __slots__ = ("address", "node_name", "port", "ports")

    def __init__(self, node_name: str, address: str, port: int, ports: tuple[PortModel, ...]) -> None:
        self.node_name = node_name
        self.address = address
        self.port = port
        self.ports = ports

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Peer:
        return cls(data["node_name"], data["address"], int(data["port"]),
                   tuple(PortModel.from_json(p) for p in data["ports"]))

    def reached_at(self, address: str, port: int) -> Peer:
        return Peer(self.node_name, address, port, self.ports)


def description(node_name: str, address: str, port: int, ports: tuple[PortModel, ...]) -> dict[str, Any]:
    return {"node_name": node_name, "address": address, "port": port, "ports": [p.to_json() for p in ports]}


def frame(message: dict[str, Any]) -> bytes:
    body = json.dumps(message).encode()
    return LENGTH.pack(len(body)) + body


def unframe(received: bytes) -> dict[str, Any] | None:
    """The message ``received`` starts with, or None while it is incomplete."""
    if len(received) < LENGTH.size:
        return None
    (size,) = LENGTH.unpack_from(received)
    if size > MAX_MESSAGE:
        raise ValueError(f"message of {size} bytes exceeds {MAX_MESSAGE}")
    if len(received) < LENGTH.size + size:
        return None
    message = json.loads(received[LENGTH.size:LENGTH.size + size])
    if not isinstance(message, dict):
        raise ValueError("a fabric message must be a JSON object")
    return message


def read_message(sock: socket.socket, deadline: float) -> dict[str, Any]:
    """One message from a blocking ``sock`` by ``deadline`` (``time.monotonic()``), else TimeoutError."""
    received = b""
    while (message := unframe(received)) is None:
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed after {len(received)} bytes of a message")
        received += chunk
    return message


def resolvable(host: str) -> str | bytes:
    """``host`` as getaddrinfo takes it: an ASCII name as bytes, which skips the idna codec (its unicodedata is
    most of a megabyte, which a responder would keep), any other name as it is."""
    return host.encode() if host.isascii() else host


def request(address: str, port: int, message: dict[str, Any]) -> dict[str, Any]:
    """Send ``message`` to the responder at ``address:port`` and return its answer (all within IO_TIMEOUT_S)."""
    deadline = time.monotonic() + IO_TIMEOUT_S
    with socket.create_connection((resolvable(address), port), timeout=IO_TIMEOUT_S) as sock:  # type: ignore[arg-type]
        sock.sendall(frame(message))
        return read_message(sock, deadline)


def _to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Directory:
    """Who else is on the fabric: the fabric directory's files plus the static peers."""

    def __init__(self, fabric_dir: Path | None, static_peers: list[tuple[str, int]], own_name: str,
                 say: Callable[[str], None] = _to_stderr) -> None:
        problem = node_name_problem(own_name)
        if problem:  # the fabric file is named after the node: never a path from an unchecked name
            raise ValueError(f"node name {problem}")
        self.fabric_dir = fabric_dir
        self.static_peers = static_peers
        self.own_name = own_name
        self.say = say
        self._published: str | None = None
        self._cache: tuple[float, list[Peer]] = (0.0, [])

    def publish(self, own: dict[str, Any]) -> None:
        if self.fabric_dir is None:
            return
        self.fabric_dir.mkdir(parents=True, exist_ok=True)
        self._published = json.dumps(own)
        atomic_write(self.fabric_dir / f"{self.own_name}.json", self._published, mode=0o600)

    def withdraw(self) -> None:
        """Remove our fabric file, only while it is still ours: a node of the same name may have replaced it."""
        if self.fabric_dir is None or self._published is None:
            return
        path = self.fabric_dir / f"{self.own_name}.json"
        with contextlib.suppress(OSError):
            if path.read_text() == self._published:
                path.unlink()

    def cached(self) -> list[Peer] | None:
        """The peers found less than PEER_CACHE_S ago, or None (ask :meth:`peers`)."""
        stamp, found = self._cache
        return found if time.monotonic() - stamp < PEER_CACHE_S else None

    def peers(self) -> list[Peer]:
        """The other nodes, found anew once the cache is stale: this blocks while static peers are asked over TCP."""
        cached = self.cached()
        if cached is not None:
            return cached
        found: dict[str, Peer] = {}
        if self.fabric_dir is not None and self.fabric_dir.is_dir():
            for path in sorted(self.fabric_dir.glob("*.json")):
                try:
                    peer = Peer.from_json(json.loads(path.read_text()))
                except (OSError, ValueError, KeyError, TypeError) as exc:
                    self.say(f"ignoring fabric entry {path}: {exc}")
                    continue
                if peer.address in WILDCARDS:  # listening everywhere: reachable on this machine's loopback
                    peer = peer.reached_at("127.0.0.1", peer.port)
                if peer.node_name != self.own_name:
                    found[peer.node_name] = peer
        for address, port in self.static_peers:
            try:
                # reach it where we were told to, whatever address it listens on
                peer = Peer.from_json(request(address, port, {"op": "describe"})).reached_at(address, port)
            except (OSError, ValueError, KeyError, TypeError) as exc:
                self.say(f"peer {address}:{port} unreachable: {exc}")
                continue
            if peer.node_name != self.own_name:
                found[peer.node_name] = peer
        result = list(found.values())
        self._cache = (time.monotonic(), result)
        return result


def partner(own_name: str, names: list[str]) -> str | None:
    """The node whose HCAs are cabled to ours: nodes pair up in sorted name order."""
    ordered = sorted(set(names) | {own_name})
    position = ordered.index(own_name)
    mate = position + 1 if position % 2 == 0 else position - 1
    return ordered[mate] if mate < len(ordered) else None
