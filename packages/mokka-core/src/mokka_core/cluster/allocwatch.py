"""The allocation watcher: what Kubernetes allocated becomes GPU memory use and processes in NVML.

Every ``interval`` it asks the kubelet (pod-resources ``List``) which containers
hold ``nvidia.com/gpu`` devices, and writes the result into the node's override
file through the same locked, validated, atomic transaction ``nvml-mock-ctl``
uses (:func:`mokka_core.ctl.store.apply`).  The node daemon (``mokka node``)
watches that file and re-renders the NVML state file, so the watcher needs no
capabilities and only write access to the root's state directory; with
``render=True`` (``--render``, for a root no daemon watches) it re-renders itself:

- a claimed GPU gets one process per claiming container (pid and name derived from
  namespace, pod and container, so the same container always shows the same pid), together
  using ``floor(aperture * used_fraction) * claims`` of its memory (clamped to the aperture,
  ``total - reserved``): process memory counts in the GPU's used memory (``model.physics``);
- an unclaimed GPU gets its processes removed again, which restores the profile's idle
  values.

The watcher owns the processes whose pid lies in ``[PID_BASE, PID_BASE + PID_SPAN)`` (and
drops ``memory.used_bytes/free_bytes`` that watchers before the load model wrote); processes set by other
writers (``nvml-mock-ctl set 0 processes=...``) are kept.  It is level-triggered:
each poll writes only when the file differs from what it should be, so a missed
change heals on the next poll.  When the kubelet does not answer, the last good
reading stays in place (nothing is cleared) and the next poll dials again.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import MokkaError
from ..model.node import Gpu, Node
from .podresources import DEFAULT_SOCKET, GPU_RESOURCE, Claim, KubeletUnavailable, PodResourcesClient

log = logging.getLogger("mokka.allocwatch")

#: Watcher-made processes have pids in this range (Linux' pid_max is 2**22, real pids rarely get here).
PID_BASE = 4_000_000
PID_SPAN = 2**22 - PID_BASE
MIB = 1 << 20

Document = dict[str, Any]


@dataclass
class WatchSettings:
    root: Path
    socket: Path = DEFAULT_SOCKET
    interval: float = 2.0
    used_fraction: float = 0.5
    resource: str = GPU_RESOURCE
    timeout: float = 5.0
    render: bool = False  # re-render the surfaces here instead of leaving it to the node daemon

    def __post_init__(self) -> None:
        if not 0 < self.used_fraction <= 1:
            raise ValueError(f"used_fraction must be in (0, 1], got {self.used_fraction}")
        if self.interval <= 0:
            raise ValueError(f"interval must be positive, got {self.interval}")


def owned_pid(pid: int) -> bool:
    return PID_BASE <= pid < PID_BASE + PID_SPAN


def process_ids(containers: list[tuple[str, str, str]]) -> dict[tuple[str, str, str], int]:
    """A stable pid per (namespace, pod, container): a hash into the owned range, probing past collisions."""
    taken: set[int] = set()
    pids = {}
    for key in sorted(set(containers)):
        pid = PID_BASE + zlib.crc32("/".join(key).encode()) % PID_SPAN
        while pid in taken:
            pid = PID_BASE + (pid - PID_BASE + 1) % PID_SPAN
        taken.add(pid)
        pids[key] = pid
    return pids


def match_gpu(device_id: str, node: Node) -> Gpu | None:
    """The GPU a kubelet device id names: a UUID (with or without ``GPU-``), a decimal index, or a DRA device
    name ``gpu-<index>``."""
    wanted = device_id.strip().lower()
    for gpu in node.gpus:
        uuid = gpu.uuid.lower()
        if wanted in (uuid, uuid.removeprefix("gpu-")):
            return gpu
    wanted = wanted.removeprefix("gpu-")
    if wanted.isdigit() and int(wanted) < len(node.gpus):
        return node.gpus[int(wanted)]
    return None


@dataclass
class Allocation:
    """What the watcher wants on each GPU: ``{index: [(namespace, pod, container), ...]}``."""

    holders: dict[int, list[tuple[str, str, str]]] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)  # device ids that name no GPU of this node


def allocate(claims: list[Claim], node: Node) -> Allocation:
    result = Allocation()
    for claim in claims:
        gpu = match_gpu(claim.device_id, node)
        if gpu is None:
            result.unknown.append(claim.device_id)
            continue
        holder = (claim.namespace, claim.pod, claim.container)
        holders = result.holders.setdefault(gpu.index, [])
        if holder not in holders:
            holders.append(holder)
    return result


def apply_allocation(doc: Document, node: Node, allocation: Allocation, used_fraction: float) -> None:
    """Rewrite the watcher-owned keys of every GPU's bucket in the override document ``doc``."""
    pids = process_ids([h for holders in allocation.holders.values() for h in holders])
    devices = doc.setdefault("devices", {})
    for gpu in node.gpus:
        key = str(gpu.index)
        bucket = devices.get(key) if isinstance(devices.get(key), dict) else {}
        holders = sorted(allocation.holders.get(gpu.index, []))
        memory = gpu.config.memory
        _drop_memory(bucket)
        share = 0
        if holders and memory is not None:
            aperture = max(0, memory.total_bytes - memory.reserved_bytes - memory.used_bytes)
            share = min(aperture, int(aperture * used_fraction) * len(holders)) // len(holders) // MIB
        mine = [{"pid": pids[h], "type": "C", "name": "/".join(h), "used_memory_mib": share} for h in holders]
        _set_processes(bucket, sorted(mine, key=lambda p: p["pid"]))
        if bucket:
            devices[key] = bucket
        else:
            devices.pop(key, None)
    if not devices:
        doc.pop("devices")


def _drop_memory(bucket: Document) -> None:
    block = bucket.get("memory")
    if not isinstance(block, dict):
        return
    block.pop("used_bytes", None)
    block.pop("free_bytes", None)
    if set(block) <= {"total_bytes"}:  # only what the ctl fills in to validate a partial block
        del bucket["memory"]


def _set_processes(bucket: Document, mine: list[Document]) -> None:
    existing = bucket.get("processes")
    others = [p for p in existing or [] if not (isinstance(p, dict) and owned_pid(int(p.get("pid", 0))))]
    if others or mine:
        bucket["processes"] = others + mine
    elif existing is not None and existing != others:
        del bucket["processes"]  # only ours were there: the profile's own list shows again


class AllocationWatcher:
    def __init__(self, settings: WatchSettings, surfaces: Mapping[str, Any] | None = None,
                 client: PodResourcesClient | None = None) -> None:
        self.settings = settings
        # no surfaces: the transaction writes the override file and renders nothing (the daemon does)
        self.surfaces = surfaces if surfaces is not None else (None if settings.render else {})
        self.client = client or PodResourcesClient(settings.socket, settings.timeout)
        self.last_claims: list[Claim] | None = None  # the last good reading
        self.kubelet_up: bool | None = None
        self.publishes = 0
        self._warned_unknown: set[str] = set()
        self._node_problem = ""

    def poll(self) -> bool:
        """One poll; True when the override file was rewritten."""
        try:
            claims = self.client.claims(self.settings.resource)
        except KubeletUnavailable as exc:
            if self.kubelet_up is not False:
                log.warning("%s; keeping the last reading (%s) and retrying every %.1f s", exc,
                            "none yet" if self.last_claims is None else f"{len(self.last_claims)} claims",
                            self.settings.interval)
            self.kubelet_up = False
            return False
        if self.kubelet_up is not True:
            log.info("kubelet pod-resources answering on %s", self.settings.socket)
        self.kubelet_up = True
        if claims != self.last_claims:
            log.info("allocations: %s", ", ".join(f"{c.namespace}/{c.pod}/{c.container}={c.device_id}"
                                                 for c in claims) or "none")
        self.last_claims = claims
        return self.publish(claims)

    def publish(self, claims: list[Claim]) -> bool:
        from ..ctl import store

        root = self.settings.root
        try:
            now = store.current(root)  # a read: the change itself is made under the node lock
            node, doc = now.node(), now.doc
        except MokkaError as exc:
            if str(exc) != self._node_problem:  # once per distinct problem, not every poll
                log.warning("node at %s not readable, nothing published: %s", root, exc)
            self._node_problem = str(exc)
            return False
        if self._node_problem:
            log.info("node at %s readable again", root)
        self._node_problem = ""
        allocation = allocate(claims, node)
        for device_id in set(allocation.unknown) - self._warned_unknown:
            log.warning("device id %r names no GPU of this node (uuids or indices 0-%d); ignored",
                        device_id, len(node.gpus) - 1)
        self._warned_unknown |= set(allocation.unknown)
        wanted = copy.deepcopy(doc)
        apply_allocation(wanted, node, allocation, self.settings.used_fraction)
        if store.normalise(wanted) == store.normalise(doc):
            return False

        def mutate(current_doc: Document, node: Node) -> str:
            apply_allocation(current_doc, node, allocate(claims, node), self.settings.used_fraction)
            return "allocations published"

        try:
            outcome = store.apply(root, mutate, surfaces=self.surfaces)
        except MokkaError as exc:
            log.error("allocations not published: %s", exc)
            return False
        self.publishes += 1
        busy = {i: len(h) for i, h in sorted(allocation.holders.items())}
        log.info("published: %s (%s)", ", ".join(f"gpu {i}: {n} container(s)" for i, n in busy.items())
                 or "no GPU allocated", outcome.render.summary())
        return True

    def run(self, stop: threading.Event) -> None:
        """Poll until ``stop`` is set; the first poll is immediate."""
        log.info("watching %s every %.1f s for %s on node root %s", self.settings.socket,
                 self.settings.interval, self.settings.resource, self.settings.root)
        try:
            while not stop.is_set():
                started = time.monotonic()
                try:
                    self.poll()
                except Exception:  # a bug in one poll must not end the sidecar
                    log.exception("poll failed")
                stop.wait(max(0.0, self.settings.interval - (time.monotonic() - started)))
        finally:
            self.client.close()
            log.info("stopped")
