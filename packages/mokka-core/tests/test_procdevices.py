"""The substitute /proc/devices and the choice of majors."""

from __future__ import annotations

import pytest

from mokka_core.errors import ConfigError
from mokka_core.stage import procdevices
from mokka_core.stage.procdevices import Majors

HOST = "Character devices:\n  1 mem\n 10 misc\n254 ndctl\n\nBlock devices:\n  7 loop\n259 blkext\n"


def test_majors_added_in_major_order_as_the_kernel_lists_them() -> None:
    text = procdevices.render(HOST, Majors(235, 236).lines(), "host")
    assert text == ("Character devices:\n  1 mem\n 10 misc\n235 nvidia-caps-imex-channels\n"
                    "236 nvidia-caps\n254 ndctl\n\nBlock devices:\n  7 loop\n259 blkext\n")
    assert procdevices.render(text, Majors(235, 236).lines(), "host") == text  # idempotent
    assert procdevices.char_majors(text, "x")[235] == ["nvidia-caps-imex-channels"]


def test_previous_lines_for_our_names_are_replaced() -> None:
    host = HOST.replace(" 10 misc\n", " 10 misc\n511 nvidia-caps-imex-channels\n510 nvidia-caps\n")
    assert procdevices.choose_majors(host, "host") == Majors(235, 236)
    text = procdevices.render(host, Majors(235, 236).lines(), "host")
    assert "511" not in text and "510" not in text
    assert text.count("nvidia-caps-imex-channels") == 1


def test_majors_owned_by_another_driver_are_avoided() -> None:
    host = HOST.replace(" 10 misc\n", " 10 misc\n235 other\n")
    majors = procdevices.choose_majors(host, "host")
    assert majors.imex_channels != 235 and majors.caps != 235
    assert majors == procdevices.choose_majors(host, "host")  # consistent


@pytest.mark.parametrize(("text", "message"), [
    ("Block devices:\n  7 loop\n", "no 'Character devices:' header"),
    ("Block devices:\n  7 loop\nCharacter devices:\n  1 mem\n", "comes before"),
    ("Character devices:\n  x mem\n", "line 2"),
])
def test_bad_host_file_is_refused_naming_the_file(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        procdevices.render(text, Majors(235, 236).lines(), "/proc/devices")
    assert "/proc/devices" in str(info.value) and message in str(info.value)


def test_equal_or_out_of_range_majors_are_refused() -> None:
    with pytest.raises(ConfigError, match="must differ"):
        procdevices.render(HOST, Majors(235, 235).lines(), "x")
    with pytest.raises(ConfigError, match=r"1\.\.4095"):
        procdevices.render(HOST, Majors(0, 236).lines(), "x")


def test_a_drivers_regions_on_one_major_keep_their_order() -> None:
    """550+ registers ``nvidia`` (minors 0-254) and ``nvidiactl`` (255) on 195 (``nv.c``, ``nv_register_chrdev``)."""
    text = procdevices.render(HOST, [(195, "nvidia"), (195, "nvidiactl"), (509, "nvidia-uvm")], "host")
    assert text.splitlines()[3:6] == ["195 nvidia", "195 nvidiactl", "254 ndctl"]
    assert text.splitlines()[6] == "509 nvidia-uvm"


def test_the_hosts_nvidia_driver_is_replaced_and_a_foreign_driver_on_our_major_refused() -> None:
    host = HOST.replace(" 10 misc\n", " 10 misc\n195 nvidia-frontend\n510 nvidia-uvm\n")
    text = procdevices.render(host, [(195, "nvidia"), (509, "nvidia-uvm")], "host")
    assert "nvidia-frontend" not in text and "510" not in text
    assert procdevices.char_majors(text, "x")[509] == ["nvidia-uvm"]
    with pytest.raises(ConfigError, match=r"line 4.*'other'"):
        procdevices.render(HOST.replace(" 10 misc\n", " 10 misc\n195 other\n"), [(195, "nvidia")], "host")
    with pytest.raises(ConfigError, match="two majors"):
        procdevices.render(HOST, [(195, "nvidia"), (196, "nvidia")], "host")
