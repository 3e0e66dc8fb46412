"""Human forms in profiles: memory 80GiB / 81559MiB, power 700W, clocks 1980MHz, PCI ids 10de:2330.

Expected values are the real H100 SXM5's (``reference/captures/qx-h100.xml``: FB memory 81559 MiB, reserved 480 MiB,
power limit 700.00 W, pci_device_id 0x233010DE, pci_sub_system_id 0x16C110DE) and the canonical
integers of the built-in profile, which must come out the same.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mokka_core.errors import ConfigError
from mokka_core.schema.builtin import load_builtin
from mokka_core.schema.loader import load_profile

H100 = load_builtin("h100").device_defaults


def profile(tmp_path: Path, defaults: str, extra: str = "") -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(f'version: "1"\nsystem: {{driver_version: "550.163.01"}}\ndevice_defaults: {defaults}\n{extra}')
    return path


def test_human_forms_give_the_real_boards_integers(tmp_path: Path) -> None:
    path = profile(tmp_path, "{memory: {total_bytes: 81559MiB, reserved_bytes: 480MiB}, "
                             "bar1_memory: {total_bytes: 128GiB}, "
                             "pci: {device_id: '10de:2330', subsystem_id: '10de:16c1'}, "
                             "power: {default_limit_mw: 700W, min_limit_mw: 200W, current_draw_mw: 71.5W}, "
                             "clocks: {graphics_max: 1980MHz, memory_max: 2.619GHz}}")
    loaded = load_profile(path).device_defaults
    assert loaded.memory is not None and H100.memory is not None
    assert loaded.memory.total_bytes == H100.memory.total_bytes == 81559 * 2**20
    assert loaded.memory.reserved_bytes == H100.memory.reserved_bytes
    assert loaded.bar1_memory is not None and H100.bar1_memory is not None
    assert loaded.bar1_memory.total_bytes == H100.bar1_memory.total_bytes
    assert loaded.pci is not None and H100.pci is not None
    assert (loaded.pci.device_id, loaded.pci.subsystem_id) == (0x233010DE, 0x16C110DE)
    assert (loaded.pci.device_id, loaded.pci.subsystem_id) == (H100.pci.device_id, H100.pci.subsystem_id)
    assert loaded.power is not None and H100.power is not None
    assert (loaded.power.default_limit_mw, loaded.power.min_limit_mw) == (700_000, H100.power.min_limit_mw)
    assert loaded.power.current_draw_mw == 71_500
    assert loaded.clocks is not None and H100.clocks is not None
    assert (loaded.clocks.graphics_max, loaded.clocks.memory_max) == (1980, 2619)
    assert loaded.clocks.graphics_max == H100.clocks.graphics_max


def test_canonical_forms_are_still_accepted(tmp_path: Path) -> None:
    path = profile(tmp_path, "{memory: {total_bytes: 85520809984}, pci: {device_id: 0x233010DE}, "
                             "power: {default_limit_mw: 700000}, clocks: {graphics_max: 1980}}")
    loaded = load_profile(path).device_defaults
    assert loaded.memory is not None and loaded.memory.total_bytes == 85520809984
    assert loaded.pci is not None and loaded.pci.device_id == 0x233010DE


def test_switch_and_hca_ids_take_their_vendors(tmp_path: Path) -> None:
    path = profile(tmp_path, "{name: x}", "nvlink: {switches: [{bdf: '0000:05:00.0', device_id: '10de:22a3'}]}\n"
                                          "infiniband: {enabled: true, pci_device_id: '15b3:1021'}\n")
    loaded = load_profile(path)
    assert loaded.nvlink is not None and loaded.nvlink.switches[0].device_id == 0x22A3
    assert loaded.infiniband is not None and loaded.infiniband.pci_device_id == 0x1021


@pytest.mark.parametrize(("defaults", "message"), [
    ("{memory: {total_bytes: eighty}}", "device_defaults.memory.total_bytes: expected bytes as a number or with a "
                                        "unit (24GiB, 81559MiB, 80GB), got 'eighty'"),
    ("{memory: {total_bytes: 80GiB, used_bytes: 1.5B}}", "device_defaults.memory.used_bytes: 1.5B is not a whole "
                                                         "number of bytes"),
    ("{power: {default_limit_mw: 700V}}", "device_defaults.power.default_limit_mw: expected milliwatts as a number "
                                          "or with a unit (700W, 450.5W, 700000mW), got '700V'"),
    ("{clocks: {graphics_max: 1980Hz}}", "device_defaults.clocks.graphics_max: expected MHz as a number or with a "
                                         "unit (1980MHz, 1.98GHz), got '1980Hz'"),
    ("{pci: {device_id: '15b3:1021'}}", "device_defaults.pci.device_id: vendor 15b3 is not 10de, the vendor of this "
                                        "device, got '15b3:1021'"),
])
def test_a_bad_human_form_is_refused_naming_the_key(tmp_path: Path, defaults: str, message: str) -> None:
    path = profile(tmp_path, defaults)
    with pytest.raises(ConfigError, match=re.escape(f"{path}: {message}")):
        load_profile(path)
