"""The IMEX daemon's two config files, as the real ``nvidia-imex`` reads them.

``config.cfg``: ``KEY=VALUE`` lines, ``#`` comments; unknown keys are accepted (the real
file has dozens).  ``nodes_config.cfg``: one peer per line, every node of the IMEX domain
including this one: an IP address or, as drivers from 570.158 take them (the DRA driver's
compute-domain daemon writes them), a DNS name resolved when the daemon connects.  ``MOKKA_NODE_IP`` is ours: several simulated nodes share
one machine's loopback addresses, so a node cannot find itself by its interfaces.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import zlib
from dataclasses import dataclass
from pathlib import Path

from mokka_core.errors import ConfigError

CONFIG_DIR = "etc/nvidia-imex"
CONFIG_FILE = f"{CONFIG_DIR}/config.cfg"
NODES_CONFIG_FILE = f"{CONFIG_DIR}/nodes_config.cfg"
DEFAULT_SERVER_PORT = 50000
DEFAULT_CMD_PORT = 50005
DEFAULT_NODE_IP = "127.0.0.1"
#: an RFC 1123 host name: dot-separated labels of letters, digits and inner hyphens, 63 bytes each, 253 in all
DNS_NAME = re.compile(r"(?=.{1,253}\Z)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}"
                      r"[A-Za-z0-9])?)*\.?\Z")


def loopback_address(root: Path) -> str:
    """A loopback address of this node's own (``127.a.b.c``, from its root), so the IMEX daemons of
    several single-node domains on one machine each bind the real port without colliding.
    Linux routes all of 127.0.0.0/8 to the loopback interface."""
    digest = zlib.crc32(str(root.absolute()).encode())
    a, b, c = digest >> 16 & 0xFF, digest >> 8 & 0xFF, digest & 0xFF
    return f"127.{a}.{b}.{max(c, 2)}"  # never 127.0.0.1 (anything of the host's may listen there)


@dataclass(frozen=True)
class ImexConfig:
    path: Path
    server_port: int
    cmd_port: int
    nodes_config: Path
    node_ip: str | None  # None: find it among the nodes config's addresses
    cmd_ip: str | None  # None: the node's own address


def render_config(root: Path, node_ip: str = DEFAULT_NODE_IP, server_port: int = DEFAULT_SERVER_PORT,
                  cmd_port: int = DEFAULT_CMD_PORT) -> str:
    return (
        "# nvidia-imex configuration of a simulated node (Mokka); the daemon is mokka_sim_imex.daemon\n"
        f"SERVER_PORT={server_port}\n"
        f"IMEX_NODE_CONFIG_FILE={root / NODES_CONFIG_FILE}\n"
        "IMEX_CMD_ENABLED=1\n"
        f"IMEX_CMD_PORT={cmd_port}\n"
        "# this node's address among those in the nodes config (simulated nodes share loopback)\n"
        f"MOKKA_NODE_IP={node_ip}\n"
    )


def render_nodes_config(addresses: list[str]) -> str:
    return "".join(f"{address}\n" for address in addresses)


def load_config(path: Path) -> ImexConfig:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(str(path), [("", f"cannot read the IMEX config: {exc.strerror or exc}")]) from None
    values: dict[str, str] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise ConfigError(str(path), [(f"line {n}", f"expected KEY=VALUE, got {raw!r}")])
        values[key.strip()] = value.strip()
    nodes = values.get("IMEX_NODE_CONFIG_FILE") or str(path.parent / "nodes_config.cfg")
    node_ip = values.get("MOKKA_NODE_IP") or os.environ.get("POD_IP") or None
    cmd_ip = values.get("IMEX_CMD_BIND_INTERFACE_IP") or None
    for key, address in (("MOKKA_NODE_IP", node_ip), ("IMEX_CMD_BIND_INTERFACE_IP", cmd_ip)):
        if address is not None:
            _check_ip(address, str(path), key)
    return ImexConfig(
        path=path,
        server_port=_port(values, "SERVER_PORT", DEFAULT_SERVER_PORT, path),
        cmd_port=_port(values, "IMEX_CMD_PORT", DEFAULT_CMD_PORT, path),
        nodes_config=Path(nodes),
        node_ip=node_ip,
        cmd_ip=cmd_ip,
    )


def load_nodes(path: Path) -> list[str]:
    """Peers (addresses or DNS names), in file order, without duplicates."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(str(path), [("", f"cannot read the IMEX nodes config: {exc.strerror or exc}")]) from None
    addresses: list[str] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        address = line.split()[0]
        if not DNS_NAME.match(address):
            _check_ip(address, str(path), f"line {n}", "an IP address or a DNS name")
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise ConfigError(str(path), [("", "lists no nodes (an IP address or a DNS name per line)")])
    return addresses


def resolve(node: str) -> set[str]:
    """The addresses of a nodes config entry now (an address is its own; a name that does not resolve has none)."""
    try:
        return {str(ipaddress.ip_address(node))}
    except ValueError:
        pass
    try:
        return {str(info[4][0]) for info in socket.getaddrinfo(node, None, type=socket.SOCK_STREAM)}
    except (OSError, UnicodeError):
        return set()


def own_entry(config: ImexConfig, nodes: list[str]) -> str:
    """This node's entry in the nodes config: the one that is, or resolves to, its address."""
    if config.node_ip is not None:
        mine = [node for node in nodes if config.node_ip in resolve(node)]
        if not mine:
            raise ConfigError(str(config.nodes_config), [("", f"lists no entry that is or resolves to this node's "
                                                          f"address {config.node_ip} (MOKKA_NODE_IP/POD_IP)")])
        return mine[0]
    if len(nodes) == 1:
        return nodes[0]
    raise ConfigError(str(config.path), [("MOKKA_NODE_IP", "must name this node's address when the domain has "
                                          f"{len(nodes)} nodes ({', '.join(nodes)})")])


def own_address(config: ImexConfig, entry: str) -> str:
    """The address this node listens on: its configured one, else what its own entry resolves to."""
    if config.node_ip is not None:
        return config.node_ip
    addresses = sorted(resolve(entry))
    if not addresses:
        raise ConfigError(str(config.nodes_config), [("", f"this node's entry {entry!r} does not resolve")])
    return addresses[0]


def _check_ip(text: str, source: str, where: str, expected: str = "an IP address") -> None:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        raise ConfigError(source, [(where, f"must be {expected}, got {text!r}")]) from None


def _port(values: dict[str, str], key: str, default: int, path: Path) -> int:
    text = values.get(key)
    if text is None or text == "":
        return default
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise ConfigError(str(path), [(key, f"must be a TCP port 1..65535, got {text!r}")])
    return int(text)
