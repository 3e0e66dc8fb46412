"""A client of the kubelet pod-resources API (``v1.PodResourcesLister``) over its unix socket.

Only ``List`` is called.  The channel is dropped after any failure and dialled
afresh on the next call, so a kubelet that restarts (and recreates its socket) is
picked up at once instead of after gRPC's reconnect back-off.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .protos import message

log = logging.getLogger(__name__)

DEFAULT_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
LIST_METHOD = "/v1.PodResourcesLister/List"
GPU_RESOURCE = "nvidia.com/gpu"
#: the NVIDIA DRA driver's GPU devices (named gpu-<index> in its ResourceSlices)
DRA_DRIVER = "gpu.nvidia.com"


class KubeletUnavailable(ConnectionError):
    """The pod-resources socket did not answer ``List``."""


@dataclass(frozen=True, order=True)
class Claim:
    """One device a container holds, as the kubelet reports it (device ids: UUIDs or indices from the device
    plugin, ``gpu-<index>`` device names from a DRA claim)."""

    namespace: str
    pod: str
    container: str
    device_id: str


def claims_of(response: Any, resource: str = GPU_RESOURCE, driver: str = DRA_DRIVER) -> list[Claim]:
    """Every (namespace, pod, container, device) in a ``ListPodResourcesResponse``: the device plugin's ids of
    ``resource`` and the devices of ``driver`` that ResourceClaims gave the container."""
    found = {
        Claim(pod.namespace, pod.name, container.name, device_id)
        for pod in response.pod_resources
        for container in pod.containers
        for devices in container.devices
        if devices.resource_name == resource
        for device_id in devices.device_ids
    }
    found |= {
        Claim(pod.namespace, pod.name, container.name, claimed.device_name)
        for pod in response.pod_resources
        for container in pod.containers
        for dynamic in container.dynamic_resources
        for claimed in dynamic.claim_resources
        if claimed.driver_name == driver and claimed.device_name
    }
    return sorted(found)


class PodResourcesClient:
    def __init__(self, socket: Path = DEFAULT_SOCKET, timeout: float = 5.0) -> None:
        self.socket = socket
        self.timeout = timeout
        self._channel: Any = None
        self._list: Any = None

    def list_pod_resources(self) -> Any:
        """The kubelet's ``ListPodResourcesResponse``; :class:`KubeletUnavailable` on any failure."""
        import grpc

        if self._channel is None:
            self._channel = grpc.insecure_channel(f"unix:{self.socket.absolute()}")
            self._list = self._channel.unary_unary(
                LIST_METHOD,
                request_serializer=lambda request: request.SerializeToString(),
                response_deserializer=message("v1.ListPodResourcesResponse").FromString,
            )
        try:
            return self._list(message("v1.ListPodResourcesRequest")(), timeout=self.timeout)
        except grpc.RpcError as exc:
            self.close()
            code = exc.code() if isinstance(exc, grpc.Call) else None
            details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
            raise KubeletUnavailable(f"pod-resources List on {self.socket} failed: {code}: {details}") from None

    def claims(self, resource: str = GPU_RESOURCE) -> list[Claim]:
        return claims_of(self.list_pod_resources(), resource)

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
        self._channel = self._list = None
