"""Human forms of profile values, as people write them: ``24GiB``, ``700W``, ``1980MHz``, ``10de:2236``.

Each parser takes what a YAML document holds (an integer, or a string) and returns the canonical
integer; anything else is passed on for the model to refuse.  A ``ValueError`` says what forms are
accepted; the loader adds the key path and the value.
"""

from __future__ import annotations

import re
from collections.abc import Callable

NUMBER = r"\s*(?P<number>\d+(?:\.\d+)?)\s*(?P<unit>[A-Za-z]*)\s*"
BYTES = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
         "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
MILLIWATTS = {"mw": 1, "w": 1000, "kw": 1_000_000}
MEGAHERTZ = {"mhz": 1, "ghz": 1000}
NVIDIA = 0x10DE
MELLANOX = 0x15B3


def _scaled(value: object, units: dict[str, int], bare: str, forms: str) -> object:
    """``value`` in the base unit; a bare number is already in it (``bare`` names it, for messages)."""
    if not isinstance(value, str):
        return value
    found = re.fullmatch(NUMBER, value)
    unit = found["unit"].lower() if found else None
    if found is None or unit not in units:
        raise ValueError(f"expected {bare} as a number or with a unit ({forms})")
    scaled = float(found["number"]) * units[str(unit)]
    if scaled != int(scaled):
        raise ValueError(f"{value} is not a whole number of {bare}")
    return int(scaled)


def byte_count(value: object) -> object:
    return _scaled(value, BYTES, "bytes", "24GiB, 81559MiB, 80GB")


def milliwatts(value: object) -> object:
    return _scaled(value, MILLIWATTS, "milliwatts", "700W, 450.5W, 700000mW")


def megahertz(value: object) -> object:
    return _scaled(value, MEGAHERTZ, "MHz", "1980MHz, 1.98GHz")


def pci_id(vendor: int | None, *, combined: bool = False) -> Callable[[object], object]:
    """A PCI id as an integer, ``0x2330``, or ``vendor:device`` as lspci -nn prints it (``10de:2330``).

    ``combined``: the id is NVML's ``device << 16 | vendor`` (``10de:2330`` is 0x233010de); else the
    device id alone.  ``vendor``: the vendor ``vendor:device`` must name (None: any, as for subsystems).
    """

    def parse(value: object) -> object:
        if not isinstance(value, str):
            return value
        text = value.strip().lower()
        pair = re.fullmatch(r"([0-9a-f]{4}):([0-9a-f]{4})", text)
        if pair is not None:
            owner, device = int(pair[1], 16), int(pair[2], 16)
            if vendor is not None and owner != vendor:
                raise ValueError(f"vendor {pair[1]} is not {vendor:04x}, the vendor of this device")
            return device << 16 | owner if combined else device
        try:
            return int(text, 16) if text.startswith("0x") else int(text)
        except ValueError:
            example = "0x233010de or 10de:2330" if combined else f"0x1021 or {vendor or 0x15B3:04x}:1021"
            raise ValueError(f"expected a PCI id: an integer, {example}") from None

    return parse
