"""Block-style YAML for data made of dicts with str keys, lists and str: the CDI spec's shapes.

The layout is PyYAML's ``default_flow_style=False`` (a list under a key is not indented past it), so
the spec reads as it did when PyYAML wrote it, without importing PyYAML on the way to ``mokka run``.
A string is written plain only when no YAML 1.1 reader (PyYAML) or YAML 1.2 reader (Go's, in the
container runtimes) can take it for anything else; every other string is double-quoted with escapes
both versions read alike.  Any other type raises TypeError rather than be written as a guess.
"""

from __future__ import annotations

import re

_SAFE = r"[A-Za-z0-9/_.+@=-]"
#: a letter or ``/`` first keeps numbers, timestamps and indicators out; a colon is followed by more text
_PLAIN = re.compile(rf"[A-Za-z/]{_SAFE}*(?::{_SAFE}+)*|[0-9]+(?:\.[0-9]+){{2,}}")  # or a version: 0.5.0
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: YAML 1.1's booleans and null, in any case (Go's readers know y and n too)
_WORDS = frozenset({"y", "n", "yes", "no", "on", "off", "true", "false", "null"})
_NEEDS_ESCAPE = re.compile(r'[^\x20-\x7e]|["\\]')


def block_yaml(data: object) -> str:
    lines: list[str] = []
    if type(data) is dict and data:
        _mapping(data, 0, "", lines)
    elif type(data) is list and data:
        _sequence(data, 0, "", lines)
    else:
        lines.append(_scalar(data))
    return "\n".join(lines) + "\n"


def _mapping(data: dict[object, object], indent: int, first: str, lines: list[str]) -> None:
    """``first`` starts the first line (a list item's dash); the other keys line up under it."""
    for i, (key, value) in enumerate(data.items()):
        head = f"{first if i == 0 else ' ' * indent}{_key(key)}:"
        if type(value) is dict and value:
            lines.append(head)
            _mapping(value, indent + 2, " " * (indent + 2), lines)
        elif type(value) is list and value:
            lines.append(head)
            _sequence(value, indent, " " * indent, lines)
        else:
            lines.append(f"{head} {_scalar(value)}")


def _sequence(data: list[object], indent: int, first: str, lines: list[str]) -> None:
    for i, item in enumerate(data):
        dash = f"{first if i == 0 else ' ' * indent}- "
        if type(item) is dict and item:
            _mapping(item, indent + 2, dash, lines)
        elif type(item) is list and item:
            _sequence(item, indent + 2, dash, lines)
        else:
            lines.append(dash + _scalar(item))


def _key(key: object) -> str:
    if type(key) is not str:
        raise TypeError(f"YAML mapping key must be str, not {type(key).__name__}: {key!r}")
    if _PLAIN_KEY.fullmatch(key) and key.lower() not in _WORDS:
        return key
    return _quoted(key)


def _scalar(value: object) -> str:
    if type(value) is str:
        return value if _PLAIN.fullmatch(value) and value.lower() not in _WORDS else _quoted(value)
    if type(value) is list and not value:
        return "[]"
    if type(value) is dict and not value:
        return "{}"
    raise TypeError(f"YAML value must be str, list or dict, not {type(value).__name__}: {value!r}")


def _quoted(text: str) -> str:
    return '"' + _NEEDS_ESCAPE.sub(_escape, text) + '"'


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    if char in '"\\':
        return "\\" + char
    if 0xD800 <= code <= 0xDFFF:
        raise ValueError(f"lone surrogate U+{code:04X} has no YAML form")
    if code < 0x100:
        return f"\\x{code:02X}"
    return f"\\u{code:04X}" if code < 0x10000 else f"\\U{code:08X}"
