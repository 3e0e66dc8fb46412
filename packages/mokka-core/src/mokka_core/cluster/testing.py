"""Stand-ins for the cluster's side of the cluster components, for tests and local trials.

:class:`FakeKubelet` serves the kubelet's pod-resources ``List`` (real gRPC, same
proto) on a unix socket; :class:`FakeRuntime` lives in :mod:`.nri.runtime`.
"""

from __future__ import annotations

import threading
from concurrent import futures
from pathlib import Path
from typing import Any

from .podresources import LIST_METHOD
from .protos import message

#: {(namespace, pod): {container: {resource: [device ids]}}}
Pods = dict[tuple[str, str], dict[str, dict[str, list[str]]]]


class FakeKubelet:
    """A pod-resources server whose allocations the test sets; ``stop()``/``start()`` mimic a kubelet restart."""

    def __init__(self, socket: Path) -> None:
        self.socket = socket
        self.pods: Pods = {}
        self.claimed: dict[tuple[str, str], dict[str, list[tuple[str, str, str]]]] = {}
        self.calls = 0
        self._lock = threading.Lock()
        self._server: Any = None

    def allocate(self, namespace: str, pod: str, container: str, *device_ids: str,
                 resource: str = "nvidia.com/gpu") -> None:
        with self._lock:
            self.pods.setdefault((namespace, pod), {}).setdefault(container, {})[resource] = list(device_ids)

    def allocate_claim(self, namespace: str, pod: str, container: str, claim: str, *device_names: str,
                       driver: str = "gpu.nvidia.com") -> None:
        """Devices of a DRA ResourceClaim given to ``container`` (the kubelet's ``dynamic_resources``)."""
        with self._lock:
            held = self.claimed.setdefault((namespace, pod), {}).setdefault(container, [])
            held += [(claim, driver, name) for name in device_names]

    def release(self, namespace: str, pod: str) -> None:
        with self._lock:
            self.pods.pop((namespace, pod), None)
            self.claimed.pop((namespace, pod), None)

    def response(self) -> Any:
        reply = message("v1.ListPodResourcesResponse")()
        with self._lock:
            for namespace, name in sorted({*self.pods, *self.claimed}):
                pod = reply.pod_resources.add(name=name, namespace=namespace)
                devices, claims = self.pods.get((namespace, name), {}), self.claimed.get((namespace, name), {})
                for container_name in sorted({*devices, *claims}):
                    container = pod.containers.add(name=container_name)
                    for resource, ids in sorted(devices.get(container_name, {}).items()):
                        container.devices.add(resource_name=resource, device_ids=ids)
                    for claim, driver, device in claims.get(container_name, []):
                        dynamic = container.dynamic_resources.add(claim_name=claim, claim_namespace=namespace)
                        dynamic.claim_resources.add(driver_name=driver, pool_name="node", device_name=device)
        return reply

    def _list(self, request: Any, context: Any) -> Any:
        self.calls += 1
        return self.response()

    def start(self) -> FakeKubelet:
        import grpc

        self.socket.parent.mkdir(parents=True, exist_ok=True)
        self.socket.unlink(missing_ok=True)
        handler = grpc.unary_unary_rpc_method_handler(
            self._list,
            request_deserializer=message("v1.ListPodResourcesRequest").FromString,
            response_serializer=lambda reply: reply.SerializeToString(),
        )
        service, method = LIST_METHOD.strip("/").split("/")
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, {method: handler}),))
        server.add_insecure_port(f"unix:{self.socket.absolute()}")
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None).wait(5)
            self._server = None
        self.socket.unlink(missing_ok=True)

    def __enter__(self) -> FakeKubelet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
