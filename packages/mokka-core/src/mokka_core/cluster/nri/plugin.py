"""The Mokka NRI plugin: registers with the container runtime and adjusts containers as they are created.

Protocol (NRI v1alpha1 over :mod:`.ttrpc`): dial the runtime's socket, serve the
``Plugin`` service on conn 1, call ``Runtime.RegisterPlugin`` on conn 2; the
runtime then calls ``Configure`` (we subscribe to ``CREATE_CONTAINER`` only),
``Synchronize`` and, for every new container, ``CreateContainer``, whose reply
carries the :mod:`.inject` adjustment.

Fail-open everywhere: any error while deciding answers "no adjustment" (the pod
starts without the mock rather than not at all); a runtime that goes away is
dialled again with back-off, and until it answers ``/readyz`` says why.  Health:
not ready while unregistered or wedged; not live while wedged (the oldest
``CreateContainer`` in flight is older than twice the runtime's request timeout).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..protos import message
from .inject import InjectConfig, decide
from .ttrpc import PLUGIN_CONN, RUNTIME_CONN, UNIMPLEMENTED, Mux, Reply

log = logging.getLogger("mokka.nri")

API = "nri.pkg.api.v1alpha1"
PLUGIN_SERVICE = f"{API}.Plugin"
RUNTIME_SERVICE = f"{API}.Runtime"
EVENT_CREATE_CONTAINER = 4
DEFAULT_SOCKET = Path("/var/run/nri/nri.sock")
DEFAULT_REQUEST_TIMEOUT = 2.0  # seconds; NRI's default, until Configure tells us the runtime's


def _shown(text: str, limit: int = 253) -> str:
    """A pod's name or value as a log line shows it: one that would break the line (or flood the log), quoted
    and cut (253: Kubernetes' longest name)."""
    return text if text.isprintable() and len(text) <= limit else repr(text[:limit])


def event_mask(*events: int) -> int:
    mask = 0
    for event in events:
        mask |= 1 << (event - 1)
    return mask


@dataclass
class PluginSettings:
    inject: InjectConfig
    socket: Path = DEFAULT_SOCKET
    name: str = "mokka"
    index: str = "10"
    health_addr: str = ":8080"  # empty: no health server
    registration_timeout: float = 5.0
    reconnect_min: float = 0.5
    reconnect_max: float = 5.0

    def __post_init__(self) -> None:
        if not (len(self.index) == 2 and self.index.isdigit()):
            raise ValueError(f"plugin index must be two digits (NRI orders plugins by it), got {self.index!r}")


@dataclass
class Counters:
    injected: int = 0
    skipped: int = 0
    failed: int = 0
    connections: int = 0


@dataclass
class NriPlugin:
    settings: PluginSettings
    registered: bool = False
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    counters: Counters = field(default_factory=Counters)
    _in_flight: dict[int, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _mux: Mux | None = None

    # health -----------------------------------------------------------------
    def wedged(self) -> str | None:
        with self._lock:
            oldest = min(self._in_flight.values(), default=None)
        if oldest is not None and time.monotonic() - oldest > 2 * self.request_timeout:
            return (f"a CreateContainer request has been in flight for over {2 * self.request_timeout:.0f} s; "
                    "the plugin is wedged")
        return None

    def live(self) -> tuple[bool, str]:
        why = self.wedged()
        return (False, why) if why else (True, "ok")

    def ready(self) -> tuple[bool, str]:
        why = self.wedged()
        if why:
            return False, why
        if not self.registered:
            return False, "not registered with the container runtime; new containers are not being injected"
        return True, f"registered as {self.settings.index}-{self.settings.name}"

    # requests from the runtime ------------------------------------------------
    def handle(self, service: str, method: str, payload: bytes) -> Reply:
        if service != PLUGIN_SERVICE:
            return Reply(code=UNIMPLEMENTED, text=f"unknown service {service}")
        if method == "Configure":
            request = message(f"{API}.ConfigureRequest").FromString(payload)
            if request.request_timeout > 0:
                self.request_timeout = request.request_timeout / 1000
            self.registered = True
            log.info("configured by %s %s (request timeout %.1f s); subscribing to CreateContainer",
                     request.runtime_name or "runtime", request.runtime_version, self.request_timeout)
            reply = message(f"{API}.ConfigureResponse")(events=event_mask(EVENT_CREATE_CONTAINER))
            return Reply(reply.SerializeToString())
        if method == "Synchronize":
            request = message(f"{API}.SynchronizeRequest").FromString(payload)
            log.info("synchronized: %d pods, %d containers already running (left as they are)",
                     len(request.pods), len(request.containers))
            return Reply(message(f"{API}.SynchronizeResponse")(more=request.more).SerializeToString())
        if method == "CreateContainer":
            return Reply(self.create_container(payload))
        if method == "Shutdown":
            log.info("runtime is shutting down")
        return Reply()  # every other event: an empty reply is "no change"

    def create_container(self, payload: bytes) -> bytes:
        token = id(payload)
        with self._lock:
            self._in_flight[token] = time.monotonic()
        response = message(f"{API}.CreateContainerResponse")()
        try:
            request = message(f"{API}.CreateContainerRequest").FromString(payload)
            pod, container = request.pod, request.container
            where = "/".join(map(_shown, (pod.namespace, pod.name, container.name)))
            decision = decide(pod, container, self.settings.inject)
            if decision.adjustment is None:
                self._count("skipped")
                log.info("%s: skipped, %s", where, _shown(decision.reason, 1024))
            else:
                response.adjust.CopyFrom(decision.adjustment)
                self._count("injected")
                log.info("%s: %s", where, _shown(decision.reason, 1024))
        except Exception:  # fail open: the container is created without the mock
            self._count("failed")
            log.exception("CreateContainer: could not decide; container left unchanged")
            response = message(f"{API}.CreateContainerResponse")()
        finally:
            with self._lock:
                self._in_flight.pop(token, None)
        return bytes(response.SerializeToString())

    def _count(self, what: str) -> None:
        with self._lock:  # requests are served on several threads
            setattr(self.counters, what, getattr(self.counters, what) + 1)

    # connection -----------------------------------------------------------------
    def connect(self) -> Mux:
        """Dial the runtime, serve our side and register; raises OSError/TimeoutError/CallFailed."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(str(self.settings.socket))
        except OSError:
            sock.close()
            raise
        mux = Mux(sock, name="nri")
        mux.channel(PLUGIN_CONN, self.handle)
        runtime = mux.channel(RUNTIME_CONN)
        mux.start()
        request = message(f"{API}.RegisterPluginRequest")(plugin_name=self.settings.name,
                                                          plugin_idx=self.settings.index)
        try:
            runtime.call(RUNTIME_SERVICE, "RegisterPlugin", request.SerializeToString(),
                         self.settings.registration_timeout)
        except BaseException:
            mux.close()
            raise
        return mux

    def run(self, stop: threading.Event) -> None:
        delay = self.settings.reconnect_min
        failing = False
        while not stop.is_set():
            try:
                mux = self.connect()
            except Exception as exc:
                if not failing:
                    log.warning("cannot register with the runtime on %s: %s; retrying", self.settings.socket, exc)
                failing = True
                stop.wait(delay)
                delay = min(self.settings.reconnect_max, delay * 2)
                continue
            failing, delay = False, self.settings.reconnect_min
            self.counters.connections += 1
            self._mux = mux
            log.info("registered with the runtime on %s as %s-%s", self.settings.socket,
                     self.settings.index, self.settings.name)
            while not stop.is_set() and not mux.closed.wait(0.2):
                pass
            self.registered = False
            self._mux = None
            mux.close()
            if not stop.is_set():
                log.warning("runtime connection lost; new containers are not injected until it is back")
        log.info("stopped")

    def disconnect(self) -> None:
        """Drop the runtime connection (tests: a plugin crash as the runtime sees it)."""
        if self._mux is not None:
            self._mux.close()
