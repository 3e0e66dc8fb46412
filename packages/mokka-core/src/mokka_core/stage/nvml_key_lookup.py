"""Full NVML state-file keys (``device.3.nvlink.7.state``), routed as the library routes them.

The keys themselves are the generated table in :mod:`.nvml_keys`; this module is what is read
off it: which scope a full key falls in, whether the library parses it, and full keys built
only from keys the table has.
"""

from __future__ import annotations

import re

from .nvml_keys import KEYS, LIMITS, MAXIMA, RANGES, SIZES, TYPES

_KEY_RE = re.compile(r"[a-z0-9_.]+")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
_NUMBER_RE = re.compile(r"-?[0-9]+|0[xX][0-9a-fA-F]+")


def _index(text: str, limit: int) -> tuple[int, str] | None:
    """A decimal index below ``limit`` (no leading zero) followed by '.', as the library reads it."""
    digits, dot, rest = text.partition(".")
    if not dot or not digits.isdigit() or not digits.isascii() or (len(digits) > 1 and digits[0] == "0"):
        return None
    value = int(digits)
    return (value, rest) if value < limit else None


def split_key(key: str) -> tuple[str, tuple[int, ...], str] | None:
    """(scope, indices, key within the scope) of a full state-file key, routed as the library routes
    it (``device.3.nvlink.7.state`` -> ``("link", (3, 7), "state")``); None where the library rejects
    the line (bad character, bad or out-of-range index) or has no scope for it."""
    if not _KEY_RE.fullmatch(key):
        return None
    head, dot, rest = key.partition(".")
    if not dot or not rest:
        return None
    if head == "system":
        return "system", (), rest
    if head in ("event", "pcifn"):
        found = _index(rest, LIMITS[head])
        return None if found is None else (head, (found[0],), found[1])
    if head != "device":
        return None
    device = _index(rest, LIMITS["device"])
    if device is None:
        return None
    index, rest = device
    if rest.startswith("nvlink.") and rest[7:8].isdigit():
        link = _index(rest[7:], LIMITS["link"])
        return None if link is None else ("link", (index, link[0]), link[1])
    if rest.startswith("process.") and len(rest) > 8:
        process = _index(rest[8:], LIMITS["process"])
        return None if process is None else ("process", (index, process[0]), process[1])
    if rest.startswith("mig_profile.") and len(rest) > 12:
        profile = _index(rest[12:], LIMITS["migprofile"])
        return None if profile is None else ("migprofile", (index, profile[0]), profile[1])
    return "device", (index,), rest


def is_known_key(key: str) -> bool:
    """Whether the library parses this full state-file key (any other key it ignores or rejects)."""
    found = split_key(key)
    return found is not None and found[2] in KEYS[found[0]]


def system_key(key: str) -> str:
    """``system.<key>``; KeyError for a key the table does not have."""
    return _full("system", key, "system.")


def device_key(index: int, key: str) -> str:
    """``device.<index>.<key>``; KeyError for a key the table does not have."""
    return _full("device", key, f"device.{index}.")


def link_key(index: int, link: int, key: str) -> str:
    """``device.<index>.nvlink.<link>.<key>``; KeyError for a key the table does not have."""
    return _full("link", key, f"device.{index}.nvlink.{link}.")


def mig_profile_key(index: int, row: int, key: str) -> str:
    """``device.<index>.mig_profile.<row>.<key>``; KeyError for a key the table does not have."""
    return _full("migprofile", key, f"device.{index}.mig_profile.{row}.")


def _full(scope: str, key: str, prefix: str) -> str:
    if key not in KEYS[scope]:
        raise KeyError(f"{key!r} is not a {scope} key of the state file (native/state-keys.toml)")
    return prefix + key


def value_problem(key: str, text: str) -> str | None:
    """Why the library would refuse ``key=text`` (the bounds of native/state-keys.toml), or None.

    Unknown keys are the library's to ignore; a control character is refused in every value (a line
    break would end the line and start another key)."""
    found = _CONTROL_RE.search(text)
    if found:
        return f"contains the control character {found[0]!r}"
    routed = split_key(key)
    if routed is None or routed[2] not in KEYS[routed[0]]:
        return None
    scope, _, name = routed
    type_ = TYPES[scope][name]
    if type_ == "str":
        limit, size = SIZES[scope][name], len(text.encode())
        return None if size <= limit else f"is {size} bytes long (UTF-8), more than {limit}"
    if type_ in ("u8list", "cpuset"):
        return _list_problem(type_, text, SIZES[scope][name])
    low, high = RANGES[type_]
    high = MAXIMA.get((scope, name), high)
    if len(text) > 24:
        return f"has {len(text)} characters, more than any {type_} number ({low}..{high})"
    if not _NUMBER_RE.fullmatch(text):
        return f"{text[:40]!r} is not a {type_} number"
    value = int(text, 0) if text[:2].lower() == "0x" else int(text)
    return None if low <= value <= high else f"{_shown(value)} is outside the {type_} range {low}..{high}"


def _list_problem(type_: str, text: str, limit: int) -> str | None:
    if not text:
        return None
    items = text.split(",")
    if type_ == "u8list" and len(items) > limit:
        return f"has {len(items)} entries, more than {limit}"
    for item in items:
        parts = item.split("-") if type_ == "cpuset" else [item]
        if len(parts) > 2 or not all(p.isascii() and p.isdigit() and len(p) <= 20 for p in parts):
            return f"{item[:40]!r} is not a {'CPU id or range' if type_ == 'cpuset' else 'number'}"
        if type_ == "u8list" and int(item) > 255:
            return f"entry {item} is outside 0..255"
        if type_ == "cpuset" and int(parts[-1]) >= limit:
            return f"CPU {_shown(int(parts[-1]))} is not below {limit}, the most CPU ids the library holds"
        if type_ == "cpuset" and int(parts[0]) > int(parts[-1]):
            return f"range {item} runs backwards"
    return None


def _shown(value: int) -> str:
    text = str(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} digits)"
