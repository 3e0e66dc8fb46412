"""A container runtime's side of NRI, for tests and local trials of the plugin.

:class:`FakeRuntime` listens on an NRI socket like containerd does, accepts
plugins, serves ``Runtime.RegisterPlugin``, then configures and synchronizes each
plugin, and lets a test create containers (``CreateContainer``) and restart the
runtime.  Same protocol as :mod:`.plugin` (mux + ttrpc + the NRI proto), from
the other end.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..protos import message
from .plugin import API, EVENT_CREATE_CONTAINER, PLUGIN_SERVICE, RUNTIME_SERVICE
from .ttrpc import PLUGIN_CONN, RUNTIME_CONN, UNIMPLEMENTED, Channel, Mux, Reply

log = logging.getLogger(__name__)


def pod(namespace: str = "default", name: str = "pod", annotations: dict[str, str] | None = None) -> Any:
    return message(f"{API}.PodSandbox")(id=f"{namespace}-{name}", name=name, uid=f"uid-{name}",
                                        namespace=namespace, annotations=annotations or {})


def container(name: str = "main", env: list[str] | None = None, mounts: list[dict[str, Any]] | None = None,
              devices: list[str] | None = None, cdi_devices: list[str] | None = None) -> Any:
    c = message(f"{API}.Container")(id=f"ctr-{name}", name=name, env=env or [])
    for mount in mounts or []:
        c.mounts.add(**mount)
    for path in devices or []:
        c.linux.devices.add(path=path, type="c")
    for cdi in cdi_devices or []:
        c.CDI_devices.add(name=cdi)
    return c


@dataclass
class PluginSession:
    mux: Mux
    plugin: Channel
    name: str = ""
    index: str = ""
    events: int = 0
    configured: threading.Event = field(default_factory=threading.Event)


class FakeRuntime:
    def __init__(self, socket_path: Path, request_timeout: float = 2.0,
                 pods: list[Any] | None = None, containers: list[Any] | None = None) -> None:
        self.socket_path = socket_path
        self.request_timeout = request_timeout
        self.pods, self.containers = pods or [], containers or []
        self.sessions: list[PluginSession] = []
        self._accepted: list[Mux] = []
        self._listener: socket.socket | None = None
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)

    def start(self) -> FakeRuntime:
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        self.socket_path.unlink(missing_ok=True)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(self.socket_path))
        listener.listen(4)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), name="fake-runtime", daemon=True).start()
        return self

    def stop(self) -> None:
        """The runtime goes away: the socket disappears and every plugin connection drops."""
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
            self._listener = None
        with self._lock:
            sessions, self.sessions = self.sessions, []
            accepted, self._accepted = self._accepted, []
        # every connection, configured or not yet: one still being configured drops too
        for mux in {id(m): m for m in [*(s.mux for s in sessions), *accepted]}.values():
            mux.close()
        self.socket_path.unlink(missing_ok=True)

    def __enter__(self) -> FakeRuntime:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            mux = Mux(conn, name="runtime")
            with self._lock:
                self._accepted.append(mux)
            session = PluginSession(mux=mux, plugin=mux.channel(PLUGIN_CONN))
            mux.channel(RUNTIME_CONN, functools.partial(self._serve, session))
            mux.start()

    def _serve(self, session: PluginSession, service: str, method: str, payload: bytes) -> Reply:
        if service != RUNTIME_SERVICE or method != "RegisterPlugin":
            return Reply(code=UNIMPLEMENTED, text=f"{service}/{method} not implemented")
        request = message(f"{API}.RegisterPluginRequest").FromString(payload)
        session.name, session.index = request.plugin_name, request.plugin_idx
        threading.Thread(target=self._configure, args=(session,), daemon=True).start()
        return Reply(message(f"{API}.Empty")().SerializeToString())

    def _configure(self, session: PluginSession) -> None:
        try:
            configure = message(f"{API}.ConfigureRequest")(
                runtime_name="mokka-fake-runtime", runtime_version="1.0",
                registration_timeout=5000, request_timeout=int(self.request_timeout * 1000))
            reply = message(f"{API}.ConfigureResponse").FromString(
                session.plugin.call(PLUGIN_SERVICE, "Configure", configure.SerializeToString(), 5))
            session.events = reply.events
            sync = message(f"{API}.SynchronizeRequest")(pods=self.pods, containers=self.containers)
            session.plugin.call(PLUGIN_SERVICE, "Synchronize", sync.SerializeToString(), 5)
        except Exception as exc:
            log.warning("plugin %s-%s not configured: %s", session.index, session.name, exc)
            session.mux.close()
            return
        with self._changed:
            self.sessions.append(session)
            session.configured.set()
            self._changed.notify_all()

    def wait_for_plugin(self, timeout: float = 10.0) -> PluginSession:
        """The newest configured plugin connection that is still open."""
        with self._changed:
            found = self._changed.wait_for(lambda: self._live(), timeout)
            if not found:
                raise TimeoutError(f"no plugin registered on {self.socket_path} within {timeout} s")
            return self._live()[-1]

    def _live(self) -> list[PluginSession]:
        return [s for s in self.sessions if not s.mux.closed.is_set()]

    def create_container(self, pod: Any, container: Any) -> Any:
        """Ask the plugin for its adjustment, as the runtime does before creating a container."""
        session = self.wait_for_plugin()
        if not session.events & (1 << (EVENT_CREATE_CONTAINER - 1)):
            raise AssertionError(f"plugin did not subscribe to CreateContainer (events {session.events:#x})")
        request = message(f"{API}.CreateContainerRequest")(pod=pod, container=container)
        payload = session.plugin.call(PLUGIN_SERVICE, "CreateContainer", request.SerializeToString(),
                                      self.request_timeout)
        return message(f"{API}.CreateContainerResponse").FromString(payload)
