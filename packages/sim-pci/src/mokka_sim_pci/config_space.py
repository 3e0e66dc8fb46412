"""PCI configuration space images, as the kernel's sysfs ``config`` file returns them to root.

A type-0 (endpoint) header, a capability chain PM -> MSI -> PCI Express -> MSI-X, and an
extended chain AER -> Secondary PCI Express (gen3+) -> SR-IOV (where the function has it, no VF
enabled).  Only what ``lspci -vvv`` decodes is
filled in; every other byte is zero, as on hardware that does not implement it.  A device that
stopped responding reads all ones (the classic "rev ff" / "Unknown header type 7f").
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple

CONFIG_SIZE = 4096

# capability ids (PCI Local Bus / PCIe base spec)
CAP_PM = 0x01
CAP_MSI = 0x05
CAP_EXP = 0x10
CAP_MSIX = 0x11
EXT_CAP_AER = 0x0001
EXT_CAP_SECONDARY_PCIE = 0x0019
EXT_CAP_SRIOV = 0x0010

# where each structure sits in the image
OFF_PM = 0x40
OFF_MSI = 0x48
OFF_EXP = 0x60
OFF_MSIX = 0xB4
OFF_AER = 0x100
OFF_SECONDARY = 0x148  # 0x0C + 2 bytes per lane: ends at 0x174 for x16
OFF_SRIOV = 0x180

DEVCAP_FLR = 1 << 28  # Function Level Reset capable
PMCSR_NO_SOFT_RESET = 1 << 3  # D3hot -> D0 keeps the function's state: no PM reset
#: The reset methods the kernel finds for a function with this image (drivers/pci/pci.c, in
#: pci_reset_fn_methods order): FLR from DevCap; not "pm" (No_Soft_Reset); not "bus" (the function sits on
#: a root bus: no bridge above it to reset its link).
RESET_METHODS = ("flr",)

COMMAND_MEMORY = 1 << 1
COMMAND_BUS_MASTER = 1 << 2
COMMAND_INTX_DISABLE = 1 << 10
STATUS_CAP_LIST = 1 << 4


@dataclass(frozen=True)
class Bar:
    """One memory BAR: its register index (0-5), where it is mapped and how big it is."""

    index: int
    address: int
    size: int
    is_64bit: bool
    prefetchable: bool

    def register_flags(self) -> int:
        return (0x4 if self.is_64bit else 0x0) | (0x8 if self.prefetchable else 0x0)


class Link(NamedTuple):
    max_gen: int
    max_width: int
    current_gen: int
    current_width: int


class Sriov(NamedTuple):
    """An SR-IOV physical function's capability (PCIe base spec 9.3.3), with no VF enabled."""

    total_vfs: int
    vf_offset: int
    vf_stride: int
    vf_device: int


#: SR-IOV Supported Page Sizes: 4K, 8K, 64K, 256K, 1M, 4M (what PCIe functions commonly report)
SRIOV_PAGE_SIZES = 0x553


class Function(NamedTuple):
    """What the config image of one endpoint function is built from."""

    vendor: int
    device: int
    subsystem_vendor: int
    subsystem_device: int
    revision: int
    class_code: int  # 24 bits: base class, subclass, programming interface
    irq: int
    link: Link
    bars: tuple[Bar, ...]
    msix_vectors: int
    driver_bound: bool  # a bound driver enables bus mastering and MSI-X and disables INTx
    sriov: Sriov | None = None


def dead_config() -> bytes:
    """A function that fell off the bus or stopped answering: every read completes as all ones."""
    return b"\xff" * CONFIG_SIZE


def build_config(fn: Function) -> bytes:
    space = bytearray(CONFIG_SIZE)
    _header(space, fn)
    _power_management(space)
    _msi(space)
    _pci_express(space, fn.link)
    _msix(space, fn)
    extended = [OFF_AER]
    if fn.link.max_gen >= 3:
        extended.append(OFF_SECONDARY)
    if fn.sriov is not None:
        extended.append(OFF_SRIOV)
    chain = dict(zip(extended, [*extended[1:], 0], strict=True))  # each structure -> the next one
    _aer(space, next_offset=chain[OFF_AER])
    if OFF_SECONDARY in chain:
        _secondary_pcie(space, fn.link.max_width, next_offset=chain[OFF_SECONDARY])
    if fn.sriov is not None:
        _sriov(space, fn.sriov)
    return bytes(space)


def _put(space: bytearray, fmt: str, offset: int, *values: int) -> None:
    struct.pack_into("<" + fmt, space, offset, *values)


def _header(space: bytearray, fn: Function) -> None:
    command = COMMAND_MEMORY
    if fn.driver_bound:
        command |= COMMAND_BUS_MASTER | COMMAND_INTX_DISABLE
    _put(space, "HHHH", 0x00, fn.vendor, fn.device, command, STATUS_CAP_LIST)
    _put(space, "I", 0x08, fn.revision | (fn.class_code << 8))
    for bar in fn.bars:
        offset = 0x10 + 4 * bar.index
        _put(space, "I", offset, (bar.address & 0xFFFFFFF0) | bar.register_flags())
        if bar.is_64bit:
            _put(space, "I", offset + 4, bar.address >> 32)
    _put(space, "HH", 0x2C, fn.subsystem_vendor, fn.subsystem_device)
    space[0x34] = OFF_PM
    space[0x3C] = fn.irq & 0xFF  # interrupt line
    space[0x3D] = 1  # INTA#


def _power_management(space: bytearray) -> None:
    # version 3, no D1/D2, no PME; PMCSR: D0, No_Soft_Reset
    _put(space, "BBHH", OFF_PM, CAP_PM, OFF_MSI, 0x0003, PMCSR_NO_SOFT_RESET)


def _msi(space: bytearray) -> None:
    # 64-bit capable, 16 messages capable, disabled (MSI-X is used instead)
    _put(space, "BBH", OFF_MSI, CAP_MSI, OFF_EXP, (1 << 7) | (4 << 1))


def _pci_express(space: bytearray, link: Link) -> None:
    base = OFF_EXP
    _put(space, "BBH", base, CAP_EXP, OFF_MSIX, 0x0002)  # capability version 2, Endpoint
    # DevCap: MaxPayload 256B, ExtTag, L0s/L1 acceptable latency unlimited, role-based errors, FLR
    _put(space, "I", base + 0x04, 0x1 | (1 << 5) | (7 << 6) | (7 << 9) | (1 << 15) | DEVCAP_FLR)
    # DevCtl: error reporting off, relaxed ordering, ext tag, MaxPayload 256B, MaxReadReq 512B
    _put(space, "HH", base + 0x08, (1 << 4) | (1 << 5) | (1 << 8) | (1 << 11) | (2 << 12), 0)
    # LnkCap: speed, width, ASPM not supported, L1 exit latency >64us, ASPM optional compliance
    _put(space, "I", base + 0x0C, link.max_gen | (link.max_width << 4) | (7 << 15) | (1 << 22))
    # LnkCtl: common clock; LnkSta: negotiated speed and width, slot clock
    _put(space, "HH", base + 0x10, 1 << 6, link.current_gen | (link.current_width << 4) | (1 << 12))
    # DevCap2: completion timeout ranges ABCD + disable, LTR, 10-bit tag completer (gen4+)
    devcap2 = 0xF | (1 << 4) | (1 << 11) | ((1 << 16) if link.max_gen >= 4 else 0)
    _put(space, "I", base + 0x24, devcap2)
    # LnkCap2: supported link speeds vector (bit n = gen n)
    speeds = sum(1 << gen for gen in range(1, link.max_gen + 1))
    _put(space, "I", base + 0x2C, speeds << 0)
    # LnkCtl2: target speed; LnkSta2: equalization complete, phases 1-3 successful (gen3+)
    equalized = 0x1E if link.current_gen >= 3 else 0
    _put(space, "HH", base + 0x30, link.max_gen, equalized)


def _msix(space: bytearray, fn: Function) -> None:
    control = (fn.msix_vectors - 1) | ((1 << 15) if fn.driver_bound else 0)
    # table and pending-bit array in BAR0, as NVIDIA and Mellanox functions place them
    _put(space, "BBHII", OFF_MSIX, CAP_MSIX, 0, control, 0x00B90000, 0x00BA0000)


def _ext_header(cap_id: int, version: int, next_offset: int) -> int:
    return cap_id | (version << 16) | (next_offset << 20)


def _aer(space: bytearray, next_offset: int) -> None:
    _put(space, "I", OFF_AER, _ext_header(EXT_CAP_AER, 2, next_offset))
    # uncorrectable severity: the spec's defaults (DLP, SDES, FCP, RxOF, MalfTLP fatal)
    _put(space, "IIII", OFF_AER + 0x04, 0, 0, 0x00462030, 0)
    _put(space, "I", OFF_AER + 0x14, 0x00002000)  # correctable mask: advisory non-fatal


def _secondary_pcie(space: bytearray, lanes: int, next_offset: int) -> None:
    _put(space, "I", OFF_SECONDARY, _ext_header(EXT_CAP_SECONDARY_PCIE, 1, next_offset))
    for lane in range(lanes):
        # lane equalization control: transmitter preset 7 / receiver hint 0 both directions
        _put(space, "H", OFF_SECONDARY + 0x0C + 2 * lane, 0x7 | (0x7 << 8))


def _sriov(space: bytearray, sriov: Sriov) -> None:
    base = OFF_SRIOV
    _put(space, "I", base, _ext_header(EXT_CAP_SRIOV, 1, 0))
    # capabilities: no VF migration; control: VFs disabled; status: 0
    _put(space, "IHH", base + 0x04, 0, 0, 0)
    # InitialVFs, TotalVFs, NumVFs (none enabled), function dependency link 0
    _put(space, "HHHBB", base + 0x0C, sriov.total_vfs, sriov.total_vfs, 0, 0, 0)
    _put(space, "HHHH", base + 0x14, sriov.vf_offset, sriov.vf_stride, 0, sriov.vf_device)
    _put(space, "II", base + 0x1C, SRIOV_PAGE_SIZES, 0x1)  # system page size: 4K
