"""YAML documents read with bounds: every document Mokka reads (profile, overlay, override, a ctl
value) is refused with a message past :data:`MAX_DOCUMENT_BYTES` or :data:`MAX_DEPTH`, never a
RecursionError or an unbounded allocation.  Imports only PyYAML (the ctl reads overrides with it)
and :mod:`.readfile`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError
from .readfile import read_bounded

_FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

#: every document Mokka reads (profile, overlay, override, a ctl value) is at most this large and deep
MAX_DOCUMENT_BYTES = 4 << 20
MAX_DEPTH = 32


def parse_yaml(text: str, source: str) -> Any:
    """Parse YAML text; a syntax error, or a document past the size or depth bound, is a ConfigError."""
    if len(text) > MAX_DOCUMENT_BYTES:
        raise ConfigError(source, [("", f"document is {len(text)} bytes, more than {MAX_DOCUMENT_BYTES}")])
    try:
        try:
            data = yaml.load(text, Loader=_FAST_LOADER)
        except yaml.YAMLError:
            data = _parse_with_position(text, source)  # the pure-Python loader's errors carry the line and column
    except RecursionError:
        raise ConfigError(source, [("", f"nested more than {MAX_DEPTH} levels deep")]) from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise ConfigError(source, [("", f"unreadable value: {str(exc).split(';')[0]}")]) from None
    if _depth(data) > MAX_DEPTH:
        raise ConfigError(source, [("", f"nested more than {MAX_DEPTH} levels deep")])
    return data


def _parse_with_position(text: str, source: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        raise ConfigError(source, [("", f"YAML syntax error at {where}: {exc.problem}")]) from None
    except yaml.YAMLError as exc:
        raise ConfigError(source, [("", f"YAML syntax error: {exc}")]) from None


def _depth(data: Any) -> int:
    """How deeply mappings and lists nest in ``data`` (walked without recursion; stops past the bound)."""
    deepest = 0
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children: Any = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > MAX_DEPTH:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest


def read_yaml_file(path: Path) -> Any:
    try:
        data = read_bounded(path, MAX_DOCUMENT_BYTES)
    except FileNotFoundError as exc:
        raise ConfigError(str(path), [("", f"cannot read file: {exc.strerror}")]) from None
    return parse_yaml(utf8_text(data, path), str(path))


def utf8_text(data: bytes, path: Path) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(str(path), [("", "file is not UTF-8 text")]) from None
