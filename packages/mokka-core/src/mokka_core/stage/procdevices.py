"""The dynamic majors of the NVIDIA capability devices, and ``/proc/devices`` with the node's drivers in it.

``nvidia-caps`` (MIG and IMEX management capabilities, ``/dev/nvidia-caps/nvidia-cap<M>``) and
``nvidia-caps-imex-channels`` get dynamic majors; the majors are chosen from the host's file so that
the gpu surface (MIG capability nodes) and the imex surface (channels, management node) agree.
The kernel's ``/proc/devices`` cannot be written, so :func:`render` makes the file a node shows there:
the host's text with the lines the node's drivers register (each surface's ``char_majors``) in the
character section, in major order as the kernel prints them (``fs/char_dev.c``: ``"%3d %s"``).
The host's own lines for those names and its NVIDIA driver's lines on those majors are dropped: on
the node, the simulated driver is the one loaded.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from ..errors import ConfigError
from ..schema.readfile import read_bounded

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

    def lines(self) -> list[tuple[int, str]]:
        """Both as ``(major, name)`` lines for :func:`render`."""
        return [(self.imex_channels, IMEX_CHANNELS_NAME), (self.caps, CAPS_NAME)]


#: a real /proc/devices is about 1 KiB
MAX_PROC_DEVICES_BYTES = 1 << 20


def host_proc_devices() -> tuple[str, str]:
    """(text, where it came from) of the host's /proc/devices ($MOKKA_HOST_PROC_DEVICES overrides)."""
    path = Path(os.environ.get(HOST_PROC_DEVICES_ENV) or "/proc/devices")
    try:
        return read_bounded(path, MAX_PROC_DEVICES_BYTES).decode("utf-8", "replace"), str(path)
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


def render(host_text: str, registered: Iterable[tuple[int, str]], source: str) -> str:
    """The host text with the ``(major, name)`` lines ``registered`` in its character section (idempotent)."""
    ours = list(dict.fromkeys(registered))
    majors_by_name: dict[str, int] = {}
    for major, name in ours:
        if not 1 <= major <= MAX_MAJOR:
            raise ConfigError(source, [(name, f"major must be 1..{MAX_MAJOR}, got {major}")])
        if majors_by_name.setdefault(name, major) != major:
            raise ConfigError(source, [(name, f"registered on two majors, {majors_by_name[name]} and {major}")])
    if CAPS_NAME in majors_by_name and majors_by_name.get(IMEX_CHANNELS_NAME) == majors_by_name[CAPS_NAME]:
        raise ConfigError(source, [("caps", f"must differ from the imex channels major {majors_by_name[CAPS_NAME]}")])
    our_majors = {major for major, _ in ours}
    dropped = set()
    for n, major, name in _char_lines(host_text, source):
        if name in majors_by_name or (major in our_majors and name.startswith("nvidia")):
            dropped.add(n)
        elif major in our_majors:
            raise ConfigError(source, [(f"line {n + 1}", f"major {major} is {name!r}'s on this host, "
                                        "and the node's NVIDIA driver needs it")])
    lines = host_text.splitlines()
    kept = [line for n, line in enumerate(lines) if n not in dropped]
    start = kept.index(CHAR_HEADER) + 1
    end = kept.index(BLOCK_HEADER) if BLOCK_HEADER in kept else len(kept)
    while end > start and not kept[end - 1].strip():
        end -= 1  # keep the blank line before "Block devices:"
    section = [(int(line.split()[0]), line) for line in kept[start:end] if line.strip()]
    section += [(major, f"{major:3d} {name}") for major, name in ours]
    section.sort(key=lambda item: item[0])  # stable: a major's own lines keep their order
    return "\n".join([*kept[:start], *(line for _, line in section), *kept[end:]]) + "\n"


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
