"""Reading the NVML state file (format: native/README.md) for the NVLink and fabric keys only.

Keys are spelled once, in the key table (``mokka_core.stage.nvml_keys``, generated from
``native/state-keys.toml``); the helpers below refuse a key the table does not have.
"""

from __future__ import annotations

from pathlib import Path

from mokka_core.stage import nvml_key_lookup
from mokka_core.stage.nvml_keys import HEADER


class StateFileError(ValueError):
    pass


def read(path: Path) -> dict[str, str]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise StateFileError(f"{path} is missing (the gpu surface stages it)") from None
    lines = text.splitlines()
    if not lines or lines[0] != HEADER:
        raise StateFileError(f"{path}: first line is not {HEADER!r}")
    if lines[-1] != "end":
        raise StateFileError(f"{path}: truncated (no final 'end' line)")
    values = {}
    for line in lines[1:-1]:
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            values[key] = value
    return values


def device_count(values: dict[str, str]) -> int:
    return len({found[1][0] for found in map(nvml_key_lookup.split_key, values)
                if found is not None and found[0] == "device"})


def device_value(values: dict[str, str], index: int, key: str) -> str | None:
    """The value of ``device.<index>.<key>`` (a ``nvml_keys.DEVICE_*`` key), None when not written."""
    return values.get(nvml_key_lookup.device_key(index, key))


def link_value(values: dict[str, str], index: int, link: int, key: str) -> str | None:
    """The value of ``device.<index>.nvlink.<link>.<key>`` (a ``nvml_keys.LINK_*`` key), None when not written."""
    return values.get(nvml_key_lookup.link_key(index, link, key))
