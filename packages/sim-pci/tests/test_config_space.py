"""The config-space images decode to the profile's values (offsets from the PCI/PCIe specs)."""

import struct

from mokka_sim_pci.config_space import (
    CONFIG_SIZE,
    OFF_EXP,
    OFF_MSIX,
    Bar,
    Function,
    Link,
    Sriov,
    build_config,
    dead_config,
)


def function(**changes: object) -> Function:
    values: dict[str, object] = dict(
        vendor=0x10DE, device=0x2330, subsystem_vendor=0x10DE, subsystem_device=0x16C1, revision=0xA1,
        class_code=0x030200, irq=19, link=Link(5, 16, 5, 16),
        bars=(Bar(0, 0x8A000000, 16 << 20, False, False), Bar(1, 0x2000_0000_0000, 128 << 30, True, True)),
        msix_vectors=6, driver_bound=True,
    )
    values.update(changes)
    return Function(**values)  # type: ignore[arg-type]


def caps(space: bytes) -> list[tuple[int, int]]:
    found, offset = [], space[0x34]
    while offset:
        found.append((offset, space[offset]))
        offset = space[offset + 1]
    return found


def test_header_ids_class_and_irq() -> None:
    space = build_config(function())
    assert len(space) == CONFIG_SIZE
    assert struct.unpack_from("<HH", space, 0) == (0x10DE, 0x2330)
    assert space[8] == 0xA1 and space[9:12] == bytes([0x00, 0x02, 0x03])
    assert struct.unpack_from("<HH", space, 0x2C) == (0x10DE, 0x16C1)
    assert space[0x0E] == 0  # type-0 header
    assert (space[0x3C], space[0x3D]) == (19, 1)


def test_bars_encode_width_and_prefetch() -> None:
    space = build_config(function())
    assert struct.unpack_from("<I", space, 0x10)[0] == 0x8A000000
    low, high = struct.unpack_from("<II", space, 0x14)
    assert low == 0x0000000C and high == 0x2000


def test_capability_chain_is_pm_msi_express_msix() -> None:
    assert [cap for _, cap in caps(build_config(function()))] == [0x01, 0x05, 0x10, 0x11]


def test_link_capability_and_status_follow_the_profile() -> None:
    space = build_config(function(link=Link(max_gen=5, max_width=16, current_gen=4, current_width=8)))
    lnkcap = struct.unpack_from("<I", space, OFF_EXP + 0x0C)[0]
    lnksta = struct.unpack_from("<H", space, OFF_EXP + 0x12)[0]
    assert (lnkcap & 0xF, (lnkcap >> 4) & 0x3F) == (5, 16)
    assert (lnksta & 0xF, (lnksta >> 4) & 0x3F) == (4, 8)
    assert struct.unpack_from("<I", space, OFF_EXP + 0x2C)[0] == 0b111110  # 2.5 .. 32 GT/s


def test_msix_enabled_only_with_a_driver() -> None:
    bound = struct.unpack_from("<H", build_config(function()), OFF_MSIX + 2)[0]
    unbound = struct.unpack_from("<H", build_config(function(driver_bound=False)), OFF_MSIX + 2)[0]
    assert bound == 0x8005 and unbound == 0x0005


def test_extended_capabilities_chain() -> None:
    space = build_config(function())
    first = struct.unpack_from("<I", space, 0x100)[0]
    assert first & 0xFFFF == 0x0001 and first >> 20 == 0x148
    second = struct.unpack_from("<I", space, 0x148)[0]
    assert second & 0xFFFF == 0x0019 and second >> 20 == 0
    gen2 = build_config(function(link=Link(2, 16, 2, 16)))
    assert struct.unpack_from("<I", gen2, 0x100)[0] >> 20 == 0  # no Secondary PCIe below gen3


def test_sriov_capability_ends_the_extended_chain() -> None:
    space = build_config(function(sriov=Sriov(total_vfs=32, vf_offset=4, vf_stride=1, vf_device=0x2330)))
    assert struct.unpack_from("<I", space, 0x148)[0] >> 20 == 0x180
    header = struct.unpack_from("<I", space, 0x180)[0]
    assert header & 0xFFFF == 0x0010 and (header >> 16) & 0xF == 1 and header >> 20 == 0
    control = struct.unpack_from("<H", space, 0x188)[0]
    initial, total, enabled = struct.unpack_from("<HHH", space, 0x18C)
    offset, stride, _, vf_device = struct.unpack_from("<HHHH", space, 0x194)
    assert (control, initial, total, enabled) == (0, 32, 32, 0)  # VFs disabled: none enabled
    assert (offset, stride, vf_device) == (4, 1, 0x2330)
    gen2 = build_config(function(link=Link(2, 16, 2, 16), sriov=Sriov(16, 4, 1, 0x20B0)))
    assert struct.unpack_from("<I", gen2, 0x100)[0] >> 20 == 0x180  # straight from AER below gen3


def test_dead_function_reads_all_ones() -> None:
    assert dead_config() == b"\xff" * CONFIG_SIZE
