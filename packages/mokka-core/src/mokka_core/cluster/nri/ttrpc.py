"""NRI's wire protocol: ttrpc calls over connections multiplexed on one unix socket.

Two layers, both big-endian:

- the multiplexer (NRI ``pkg/net/multiplex``): frames of ``conn id (u32) | length
  (u32) | payload`` carry two logical byte streams, conn 1 for the plugin's
  service (the runtime calls the plugin) and conn 2 for the runtime's service
  (the plugin calls ``RegisterPlugin``).  Frame boundaries mean nothing to the
  streams on top; each conn is reassembled as a byte stream.
- ttrpc (containerd ``ttrpc``): messages of ``length (u32) | stream id (u32) |
  type (u8: 1 request, 2 response) | flags (u8)`` and a protobuf ``ttrpc.Request``
  or ``ttrpc.Response`` body.  Clients use odd stream ids.

:class:`Mux` owns the socket and a reader thread; :class:`Channel` is one ttrpc
endpoint on one conn, serving requests (handlers run on a small thread pool, so
a slow one never stalls the reader) and making calls.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
import threading
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from typing import Any

from ..protos import message

log = logging.getLogger(__name__)

PLUGIN_CONN = 1
RUNTIME_CONN = 2

MUX_HEADER = struct.Struct(">II")
TTRPC_HEADER = struct.Struct(">IIBB")
TYPE_REQUEST = 1
TYPE_RESPONSE = 2
MAX_MESSAGE = 4 << 20

# gRPC status codes used here
UNIMPLEMENTED = 12
INTERNAL = 13


class ChannelClosed(ConnectionError):
    """The connection ended before the call was answered."""


class CallFailed(RuntimeError):
    def __init__(self, code: int, text: str) -> None:
        super().__init__(f"ttrpc status {code}: {text}")
        self.code = code


@dataclass
class Reply:
    payload: bytes = b""
    code: int = 0
    text: str = ""


#: handler(service, method, payload) -> Reply
Handler = Callable[[str, str, bytes], Reply]


class Mux:
    """One unix stream socket carrying several logical conns; ``closed`` is set when it ends."""

    def __init__(self, sock: socket.socket, name: str = "nri") -> None:
        self.sock = sock
        self.name = name
        self.closed = threading.Event()
        self.channels: dict[int, Channel] = {}
        self._write_lock = threading.Lock()
        self._reader = threading.Thread(target=self._read_loop, name=f"{name}-mux", daemon=True)

    def channel(self, conn_id: int, handler: Handler | None = None) -> Channel:
        ch = Channel(self, conn_id, handler)
        self.channels[conn_id] = ch
        return ch

    def start(self) -> Mux:
        self._reader.start()
        return self

    def send(self, conn_id: int, data: bytes) -> None:
        with self._write_lock:
            self.sock.sendall(MUX_HEADER.pack(conn_id, len(data)) + data)

    def close(self) -> None:
        if not self.closed.is_set():
            self.closed.set()
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_RDWR)
            self.sock.close()
            for ch in self.channels.values():
                ch.fail_pending()

    def _read_exact(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self.sock.recv(min(n, 1 << 16))
            if not chunk:
                raise EOFError
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def _read_loop(self) -> None:
        try:
            while True:
                conn_id, length = MUX_HEADER.unpack(self._read_exact(MUX_HEADER.size))
                if length > MAX_MESSAGE + TTRPC_HEADER.size:
                    raise ValueError(f"oversized mux frame ({length} bytes)")
                data = self._read_exact(length)
                ch = self.channels.get(conn_id)
                if ch is not None:
                    ch.feed(data)
        except (EOFError, OSError, ValueError) as exc:
            if not self.closed.is_set():
                log.debug("%s: connection ended (%r)", self.name, exc)
        except Exception as exc:  # a message that does not decode: the peer is broken, the connection goes
            log.warning("%s: closing the connection: %s: %s", self.name, type(exc).__name__, exc)
        finally:
            self.close()
            for ch in self.channels.values():
                ch.shutdown()


class Channel:
    """A ttrpc endpoint on one mux conn."""

    def __init__(self, mux: Mux, conn_id: int, handler: Handler | None) -> None:
        self.mux = mux
        self.conn_id = conn_id
        self.handler = handler
        self._buffer = bytearray()
        self._next_stream = 1
        self._pending: dict[int, futures.Future[Any]] = {}
        self._lock = threading.Lock()
        self._workers = futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix=f"{mux.name}-{conn_id}")

    def feed(self, data: bytes) -> None:
        self._buffer += data
        while len(self._buffer) >= TTRPC_HEADER.size:
            length, stream, kind, _flags = TTRPC_HEADER.unpack_from(self._buffer)
            if length > MAX_MESSAGE:
                raise ValueError(f"oversized ttrpc message ({length} bytes)")
            end = TTRPC_HEADER.size + length
            if len(self._buffer) < end:
                return
            body = bytes(self._buffer[TTRPC_HEADER.size:end])
            del self._buffer[:end]
            if kind == TYPE_REQUEST:
                self._workers.submit(self._serve, stream, body)
            elif kind == TYPE_RESPONSE:
                with self._lock:
                    waiter = self._pending.pop(stream, None)
                if waiter is not None:
                    try:
                        waiter.set_result(message("ttrpc.Response").FromString(body))
                    except Exception as exc:  # the call ends now, and the connection with it (the caller)
                        waiter.set_exception(ChannelClosed(f"the answer does not decode: {exc}"))
                        raise ValueError(f"undecodable ttrpc response ({exc})") from None

    def _serve(self, stream: int, body: bytes) -> None:
        try:
            request = message("ttrpc.Request").FromString(body)
            if self.handler is None:
                reply = Reply(code=UNIMPLEMENTED, text="no service on this connection")
            else:
                reply = self.handler(request.service, request.method, request.payload)
        except Exception as exc:  # never let a handler bug kill the connection
            log.exception("ttrpc handler failed")
            reply = Reply(code=INTERNAL, text=f"{type(exc).__name__}: {exc}")
        response = message("ttrpc.Response")(payload=reply.payload)
        if reply.code:
            response.status.code, response.status.message = reply.code, reply.text
        self._send(stream, TYPE_RESPONSE, response.SerializeToString())

    def call(self, service: str, method: str, payload: bytes, timeout: float) -> bytes:
        """A unary call; raises :class:`ChannelClosed`, :class:`CallFailed` or ``TimeoutError``."""
        waiter: futures.Future[Any] = futures.Future()
        with self._lock:
            stream = self._next_stream
            self._next_stream += 2
            self._pending[stream] = waiter
        request = message("ttrpc.Request")(service=service, method=method, payload=payload,
                                             timeout_nano=int(timeout * 1e9))
        self._send(stream, TYPE_REQUEST, request.SerializeToString())
        try:
            response = waiter.result(timeout)
        except futures.TimeoutError:
            with self._lock:
                self._pending.pop(stream, None)
            raise TimeoutError(f"{service}/{method}: no answer within {timeout} s") from None
        if response.status.code:
            raise CallFailed(response.status.code, response.status.message)
        return bytes(response.payload)

    def _send(self, stream: int, kind: int, body: bytes) -> None:
        try:
            self.mux.send(self.conn_id, TTRPC_HEADER.pack(len(body), stream, kind, 0) + body)
        except OSError as exc:
            self.mux.close()
            raise ChannelClosed(f"connection closed: {exc}") from None

    def fail_pending(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
        for waiter in pending.values():
            if not waiter.done():
                waiter.set_exception(ChannelClosed("connection closed"))

    def shutdown(self) -> None:
        self.fail_pending()
        self._workers.shutdown(wait=False, cancel_futures=True)
