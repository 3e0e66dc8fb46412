"""Deterministic identities: the same profile, node name and index always give the same GPU.

Nothing here is random: UUIDs, serials, bus numbers, GUIDs and LIDs are pure
functions of their inputs so that every surface, every process and every
re-render agree.
"""

from __future__ import annotations

import hashlib

MOKKA_NAMESPACE = "6d6f6b6b-612d-4e56-8d4c-2d6d6f636b00"


def gpu_uuid(profile: str, node_name: str, index: int) -> str:
    return f"GPU-{_uuid5(f'gpu/{profile}/{node_name}/{index}')}"


def switch_uuid(profile: str, node_name: str, index: int) -> str:
    return f"SWITCH-{_uuid5(f'nvswitch/{profile}/{node_name}/{index}')}"


def board_serial(profile: str, node_name: str, index: int) -> str:
    """A 13-digit board serial like the ones nvidia-smi prints (e.g. 1652822012345)."""
    digest = hashlib.sha256(f"serial/{profile}/{node_name}/{index}".encode()).digest()
    return "1" + str(int.from_bytes(digest[:8], "big") % 10**12).zfill(12)


def fnv1a_32(text: str) -> int:
    value = 0x811C9DC5
    for byte in text.encode():
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return value


def hca_guids(guid_prefix: str, node_name: str, index: int) -> tuple[int, int]:
    """(node GUID, port 1 GUID): 32 fixed prefix bits, then node-name and HCA-index bits."""
    prefix = int(guid_prefix.replace(":", "")[:8], 16)
    node_bits = fnv1a_32(node_name) & 0x7FFFFF
    low = (node_bits << 9) | (index << 1)
    node_guid = (prefix << 32) | low
    return node_guid, node_guid | 1


def hca_lid(node_name: str, index: int, hca_count: int) -> int:
    """Unicast LIDs (0x0100..0xBFFF) that differ between nodes and between HCAs of a node."""
    slots = (0xBFFF - 0x0100 + 1) // max(hca_count, 1)
    return 0x0100 + (fnv1a_32(node_name) % slots) * hca_count + index


def format_guid(value: int) -> str:
    text = f"{value:016x}"
    return ":".join(text[i : i + 4] for i in range(0, 16, 4))


def legacy_irq(bus_id: str) -> int:
    """The INTx line the platform routes to a PCI function: sysfs ``irq`` and NVRM's ``IRQ:`` agree on it."""
    domain, bus, devfn = bus_id.split(":")
    return 16 + (int(domain, 16) + int(bus, 16) + int(devfn.split(".")[0], 16)) % 8


def gpu_dma_bits(architecture: str | None) -> int:
    """DMA address width NVIDIA's driver programs: 52 bits from Hopper on, 47 before."""
    return 52 if architecture in ("hopper", "blackwell") else 47


def _uuid5(name: str) -> str:
    import uuid  # only where a node is resolved: the ctl changes nodes without naming new GPUs

    return str(uuid.uuid5(uuid.UUID(MOKKA_NAMESPACE), name))
