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

import asyncio
import contextlib
import json
import logging
import struct
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from mokka_core.model.node import node_name_problem
from mokka_core.stage.store import atomic_write

from .mad import PortModel

log = logging.getLogger(__name__)
LENGTH = struct.Struct(">I")
MAX_MESSAGE = 1 << 20
IO_TIMEOUT_S = 5.0
PEER_CACHE_S = 2.0
WILDCARDS = ("", "0.0.0.0", "::")


@dataclass(frozen=True)
class Peer:
    node_name: str
    address: str
    port: int
    ports: tuple[PortModel, ...]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Peer:
        return cls(data["node_name"], data["address"], int(data["port"]),
                   tuple(PortModel.from_json(p) for p in data["ports"]))


def description(node_name: str, address: str, port: int, ports: tuple[PortModel, ...]) -> dict[str, Any]:
    return {"node_name": node_name, "address": address, "port": port, "ports": [p.to_json() for p in ports]}


async def read_message(reader: asyncio.StreamReader) -> dict[str, Any]:
    (size,) = LENGTH.unpack(await reader.readexactly(LENGTH.size))
    if size > MAX_MESSAGE:
        raise ValueError(f"message of {size} bytes exceeds {MAX_MESSAGE}")
    message = json.loads(await reader.readexactly(size))
    if not isinstance(message, dict):
        raise ValueError("a fabric message must be a JSON object")
    return message


def frame(message: dict[str, Any]) -> bytes:
    body = json.dumps(message).encode()
    return LENGTH.pack(len(body)) + body


async def request(address: str, port: int, message: dict[str, Any]) -> dict[str, Any]:
    async def exchange() -> dict[str, Any]:
        reader, writer = await asyncio.open_connection(address, port)
        try:
            writer.write(frame(message))
            await writer.drain()
            return await read_message(reader)
        finally:
            writer.close()

    return await asyncio.wait_for(exchange(), IO_TIMEOUT_S)


class Directory:
    """Who else is on the fabric: the fabric directory's files plus the static peers."""

    def __init__(self, fabric_dir: Path | None, static_peers: list[tuple[str, int]], own_name: str) -> None:
        problem = node_name_problem(own_name)
        if problem:  # the fabric file is named after the node: never a path from an unchecked name
            raise ValueError(f"node name {problem}")
        self.fabric_dir = fabric_dir
        self.static_peers = static_peers
        self.own_name = own_name
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

    async def peers(self) -> list[Peer]:
        stamp, cached = self._cache
        if time.monotonic() - stamp < PEER_CACHE_S:
            return cached
        found: dict[str, Peer] = {}
        if self.fabric_dir is not None and self.fabric_dir.is_dir():
            for path in sorted(self.fabric_dir.glob("*.json")):
                try:
                    peer = Peer.from_json(json.loads(path.read_text()))
                except (OSError, ValueError, KeyError, TypeError) as exc:
                    log.warning("ignoring fabric entry %s: %s", path, exc)
                    continue
                if peer.address in WILDCARDS:  # listening everywhere: reachable on this machine's loopback
                    peer = replace(peer, address="127.0.0.1")
                if peer.node_name != self.own_name:
                    found[peer.node_name] = peer
        for address, port in self.static_peers:
            try:
                # reach it where we were told to, whatever address it listens on
                peer = replace(Peer.from_json(await request(address, port, {"op": "describe"})), address=address,
                               port=port)
            except (TimeoutError, OSError, ValueError, KeyError, TypeError, asyncio.IncompleteReadError) as exc:
                log.info("peer %s:%d unreachable: %s", address, port, exc)
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
