"""``/healthz`` and ``/readyz`` over HTTP: 200 or 503 with a one-line reason."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

log = logging.getLogger(__name__)

#: a probe returns (ok, reason)
Probe = Callable[[], tuple[bool, str]]
#: how long a connection may send nothing before it is closed: a probe asks at once, and an idle
#: connection must not hold a thread forever
IDLE_TIMEOUT_S = 5.0


class HealthServer:
    def __init__(self, address: str, live: Probe, ready: Probe) -> None:
        host, _, port = address.rpartition(":")
        probes = {"/healthz": live, "/readyz": ready}

        class Handler(BaseHTTPRequestHandler):
            timeout = IDLE_TIMEOUT_S

            def do_GET(self) -> None:
                probe = probes.get(self.path.split("?")[0])
                if probe is None:
                    ok, reason, status = False, "not found", 404
                else:
                    ok, reason = probe()
                    status = 200 if ok else 503
                body = (reason + "\n").encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # probes every few seconds: keep quiet
                log.debug(format, *args)

        self.server = ThreadingHTTPServer((host or "0.0.0.0", int(port)), Handler)
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, name="health", daemon=True)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def start(self) -> HealthServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
