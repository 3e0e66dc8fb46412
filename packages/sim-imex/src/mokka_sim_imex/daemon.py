"""The fake ``nvidia-imex``: reads its nodes config, connects to every peer, reports readiness.

Like the real daemon it listens on ``SERVER_PORT`` of its own address for peers and on
``IMEX_CMD_PORT`` for ``nvidia-imex-ctl``.  Each peer is probed about once a second: a
peer is up when its daemon answers the greeting.  A peer named by DNS name is resolved at each
probe; SIGUSR1 re-reads the nodes config (the DRA driver's compute-domain daemon sends it when
the name-to-address mapping changes).  The node is READY while every node of
the domain (itself included) is up.  Failed, it never opens its server port, so it is
never ready and its peers see it down.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mokka_core.errors import MokkaError
from mokka_core.node.foreground import foreground, print_version
from mokka_core.stage.paths import find_root

from .config import CONFIG_FILE, ImexConfig, load_config, load_nodes, own_address, own_entry

PROGRAM = "nvidia-imex"
#: what the real ``--version`` prints, ``{driver}`` the driver version (see the package README)
VERSION_TEXT = "IMEX version is: {driver}"
GREETING = b"MOKKA-IMEX 1"
PROBE_INTERVAL = 1.0
PROBE_TIMEOUT = 0.5
QUERY = b"QUERY\n"


@dataclass
class Status:
    nodes: list[str]
    up: set[str]

    @property
    def ready(self) -> bool:
        return self.up >= set(self.nodes)

    def answer(self) -> bytes:
        if self.ready:
            return b"READY\n"
        return f"NOT_READY {len(self.up & set(self.nodes))}/{len(self.nodes)}\n".encode()


def listen(address: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((address, port))
    except OSError as exc:
        sock.close()
        raise MokkaError(f"{PROGRAM}: cannot listen on {address}:{port}: {exc.strerror or exc}") from None
    sock.listen(64)
    sock.settimeout(0.2)
    return sock


def serve_forever(sock: socket.socket, stop: threading.Event, handle: Callable[[socket.socket], None]) -> None:
    with sock:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            except OSError:
                if stop.is_set():
                    break
                raise
            with conn:
                conn.settimeout(PROBE_TIMEOUT)
                with contextlib.suppress(OSError):
                    handle(conn)


def probe(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=PROBE_TIMEOUT) as conn:
            return conn.recv(64).startswith(GREETING)
    except OSError:
        return False


def run(config: ImexConfig, failed: bool, stop: threading.Event, log: Callable[[str], None] = print,
        ready: threading.Event | None = None) -> None:
    nodes = load_nodes(config.nodes_config)
    entry = own_entry(config, nodes)
    me = own_address(config, entry)
    status = Status(nodes=nodes, up=set())
    reload = threading.Event()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGUSR1, lambda *_: reload.set())
    threads = []
    if not failed:
        server = listen(me, config.server_port)
        threads.append(threading.Thread(
            target=serve_forever, args=(server, stop, lambda conn: conn.sendall(GREETING + f" {me}\n".encode())),
            daemon=True))
    cmd = listen(config.cmd_ip or me, config.cmd_port)

    def answer(conn: socket.socket) -> None:
        if conn.recv(64).startswith(QUERY.strip()):
            conn.sendall(status.answer())

    threads.append(threading.Thread(target=serve_forever, args=(cmd, stop, answer), daemon=True))
    for thread in threads:
        thread.start()
    log(f"{PROGRAM}: node {entry if entry == me else f'{entry} ({me})'}, {len(nodes)} node(s) in the domain, server port {config.server_port}, "
        f"command port {config.cmd_port}{' (failed: server never starts)' if failed else ''}")
    was_ready = None
    while not stop.is_set():
        if reload.is_set():
            reload.clear()
            try:
                nodes = status.nodes = load_nodes(config.nodes_config)
                log(f"{PROGRAM}: nodes config re-read: {len(nodes)} node(s)")
            except MokkaError as exc:
                log(f"{PROGRAM}: nodes config not re-read, keeping {len(nodes)} node(s): {exc}")
        up = {entry} if not failed else set()
        up |= {peer for peer in nodes if peer != entry and probe(peer, config.server_port)}
        for peer in sorted(set(nodes) - {entry}):
            if (peer in up) != (peer in status.up):
                log(f"{PROGRAM}: peer {peer} {'connected' if peer in up else 'disconnected'}")
        status.up = up
        if status.ready != was_ready:
            log(f"{PROGRAM}: {status.answer().decode().strip()}")
            was_ready = status.ready
            if ready is not None and status.ready:
                ready.set()
        stop.wait(PROBE_INTERVAL)
    for thread in threads:
        thread.join(timeout=2)
    log(f"{PROGRAM}: clean shutdown")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=PROGRAM, description="Fake NVIDIA IMEX daemon of a simulated node.")
    parser.add_argument("-c", "--config", type=Path, default=None,
                        help=f"config file (default: <root>/{CONFIG_FILE})")
    parser.add_argument("--root", type=Path, default=None, help="staged root (default: $MOKKA_ROOT, else /)")
    parser.add_argument("--failed", action="store_true", help="never become ready (peers see this node down)")
    parser.add_argument("--nogpu", action="store_true", help="accepted, as the real daemon's flag")
    parser.add_argument("--version", action="store_true",
                        help="print the version (the node's driver version, as the real one's matches its driver)")
    args = parser.parse_args(argv)
    if args.version:
        print_version(PROGRAM, VERSION_TEXT, args.root)

    def serve(stop: threading.Event, ready: threading.Event) -> None:
        config = load_config(args.config or find_root(args.root) / CONFIG_FILE)
        run(config, args.failed, stop, log=lambda line: print(line, flush=True), ready=ready)

    sys.exit(foreground(PROGRAM, serve))


if __name__ == "__main__":
    main()
