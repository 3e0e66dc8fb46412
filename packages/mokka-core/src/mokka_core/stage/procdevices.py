"""The dynamic majors of the NVIDIA capability devices, and the substitute ``/proc/devices`` naming them.

``nvidia-caps`` (MIG and IMEX management capabilities, ``/dev/nvidia-caps/nvidia-cap<M>``) and
``nvidia-caps-imex-channels`` get dynamic majors; the majors are chosen from the host's file so that
the gpu surface (MIG capability nodes) and the imex surface (channels, management node) agree.
The kernel's ``/proc/devices`` cannot be written, so the DRA driver reads an alternative file
(``altProcDevices``) to learn the majors: the host's text with our two majors added at the end of
the character section, any earlier lines for those names dropped.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from ..errors import ConfigError

IMEX_CHANNELS_NAME = "nvidia-caps-imex-channels"
CAPS_NAME = "nvidia-caps"
#: the majors the real driver usually gets on a small host; used unless the host already owns them
PREFERRED_MAJORS = (235, 236)
MAX_MAJOR = 4095
CHAR_HEADER = "Character devices:"
BLOCK_HEADER = "Block devices:"
HOST_PROC_DEVICES_ENV = "MOKKA_HOST_PROC_DEVICES"
#: used where the host has no /proc/devices (not Linux)
MINIMAL_PROC_DEVICES = "Character devices:\n  1 mem\n\nBlock devices:\n  7 loop\n"


class Majors(NamedTuple):
    imex_channels: int
    caps: int


def host_proc_devices() -> tuple[str, str]:
    """(text, where it came from) of the host's /proc/devices ($MOKKA_HOST_PROC_DEVICES overrides)."""
    path = Path(os.environ.get(HOST_PROC_DEVICES_ENV) or "/proc/devices")
    try:
        return path.read_text(), str(path)
    except FileNotFoundError:
        return MINIMAL_PROC_DEVICES, "built-in /proc/devices"


def host_majors() -> Majors:
    """The capability majors for this host (the same for every surface)."""
    return choose_majors(*host_proc_devices())


def char_majors(text: str, source: str) -> dict[int, list[str]]:
    """Character-device majors of a /proc/devices text, by number."""
    majors: dict[int, list[str]] = {}
    for _, major, name in _char_lines(text, source):
        majors.setdefault(major, []).append(name)
    return majors


def choose_majors(host_text: str, source: str) -> Majors:
    """Majors for our two names: the preferred ones unless another driver owns them, else free ones from the top."""
    taken = {major for major, names in char_majors(host_text, source).items()
             if any(name not in (IMEX_CHANNELS_NAME, CAPS_NAME) for name in names)}
    candidates = [*PREFERRED_MAJORS, *range(511, 383, -1), *range(254, 233, -1)]
    free = [major for major in dict.fromkeys(candidates) if major not in taken]
    if len(free) < 2:
        raise ConfigError(source, [("Character devices", "no free major numbers left for the IMEX devices")])
    return Majors(imex_channels=free[0], caps=free[1])


def render(host_text: str, majors: Majors, source: str) -> str:
    """The host text with our majors at the end of the character section (idempotent)."""
    for field, value in (("imex_channels", majors.imex_channels), ("caps", majors.caps)):
        if not 1 <= value <= MAX_MAJOR:
            raise ConfigError(source, [(field, f"major must be 1..{MAX_MAJOR}, got {value}")])
    if majors.imex_channels == majors.caps:
        raise ConfigError(source, [("caps", f"must differ from the imex channels major {majors.imex_channels}")])
    lines = host_text.splitlines()
    ours = {n for n, _, name in _char_lines(host_text, source) if name in (IMEX_CHANNELS_NAME, CAPS_NAME)}
    kept = [line for n, line in enumerate(lines) if n not in ours]
    block = kept.index(BLOCK_HEADER) if BLOCK_HEADER in kept else len(kept)
    end = block
    while end > 0 and not kept[end - 1].strip():
        end -= 1  # keep the blank line before "Block devices:"
    added = [f"{majors.imex_channels:3d} {IMEX_CHANNELS_NAME}", f"{majors.caps:3d} {CAPS_NAME}"]
    return "\n".join([*kept[:end], *added, *kept[end:]]) + "\n"


def _char_lines(text: str, source: str) -> list[tuple[int, int, str]]:
    """(line number, major, name) of every character-device line."""
    lines = text.splitlines()
    if CHAR_HEADER not in lines:
        raise ConfigError(source, [("", f"no {CHAR_HEADER!r} header; is this a /proc/devices file?")])
    start = lines.index(CHAR_HEADER)
    if BLOCK_HEADER in lines and lines.index(BLOCK_HEADER) < start:
        raise ConfigError(source, [("", f"{BLOCK_HEADER!r} comes before {CHAR_HEADER!r}")])
    found = []
    for n in range(start + 1, len(lines)):
        line = lines[n].strip()
        if line == BLOCK_HEADER:
            break
        if not line:
            continue
        major, _, name = line.partition(" ")
        if not major.isdigit() or not name.strip():
            raise ConfigError(source, [(f"line {n + 1}", f"expected '<major> <name>', got {lines[n]!r}")])
        found.append((n, int(major), name.strip()))
    return found
