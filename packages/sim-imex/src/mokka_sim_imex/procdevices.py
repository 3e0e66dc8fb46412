"""The substitute ``/proc/devices`` that names the IMEX majors.

The kernel's ``/proc/devices`` cannot be written, so the DRA driver reads an alternative
file (``altProcDevices``) to learn the ``nvidia-caps-imex-channels`` major.  This module
derives it from the host's file: the same text with our two majors added at the end of
the character section, any earlier lines for those names dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

from mokka_core.errors import ConfigError

IMEX_CHANNELS_NAME = "nvidia-caps-imex-channels"
CAPS_NAME = "nvidia-caps"
#: the majors the real driver usually gets on a small host; used unless the host already owns them
PREFERRED_MAJORS = (235, 236)
MAX_MAJOR = 4095
CHAR_HEADER = "Character devices:"
BLOCK_HEADER = "Block devices:"


@dataclass(frozen=True)
class Majors:
    imex_channels: int
    caps: int


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
