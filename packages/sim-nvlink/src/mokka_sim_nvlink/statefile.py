"""Reading the NVML state file (format: native/README.md) for the NVLink and fabric keys only."""

from __future__ import annotations

from pathlib import Path

HEADER = "mokka-nvml-state 1"


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
    return len({key.split(".")[1] for key in values if key.startswith("device.")})
