"""Read YAML documents into validated models with errors that point at the defect.

* YAML syntax errors carry the line and column.
* Unknown keys are a warning in a profile (dropped, so profiles written for newer
  tools still load) and an error in a runtime override.
* Validation errors name the key path and the offending value.
"""

from __future__ import annotations

import logging
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from ..errors import ConfigError, describe, key_path
from .overlays import KeysOf, Override, SurfacesFile, TopologyOverlay
from .profile import Profile
from .readfile import read_bounded
from .yamldoc import MAX_DOCUMENT_BYTES, parse_yaml, read_yaml_file, utf8_text

__all__ = ["load_overlay", "load_override", "load_profile", "load_profile_text", "load_surfaces", "parse_yaml",
           "read_override", "read_yaml_file", "validate"]

log = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)


def validate(model: type[M], data: Any, source: str, *, strict_keys: bool) -> M:
    """Validate ``data`` against ``model``.

    With ``strict_keys`` unknown keys are errors; otherwise each one is logged as a
    warning and dropped before validation.
    """
    if data is None:
        raise ConfigError(source, [("", "file is empty")])
    if not isinstance(data, dict):
        raise ConfigError(source, [("", f"must be a YAML mapping at the top level, got {type(data).__name__}")])
    unknown: list[str] = []
    cleaned = _strip_unknown(model, data, (), unknown)
    if unknown:
        if strict_keys:
            raise ConfigError(source, [(path, "unknown key") for path in unknown])
        for path in unknown:
            log.warning("%s: %s: unknown key ignored", source, path)
    try:
        document = model.model_validate(cleaned)
    except ValidationError as exc:
        raise ConfigError(source, _problems(exc, cleaned)) from None
    return document


def _problems(exc: ValidationError, data: Any) -> list[tuple[str, str]]:
    problems = []
    for error in exc.errors(include_url=False):
        loc = [part for part in error["loc"] if not _is_union_tag(part) and part != "[key]"]  # a bad mapping key
        message = error["msg"].removeprefix("Value error, ")
        value = error.get("input", _lookup(data, loc))
        if error["type"] != "missing" and not isinstance(value, (dict, list)):
            message += f", got {describe(value)}"
        problems.append((key_path(loc), message))
    return _dedupe(problems)


def _is_union_tag(part: Any) -> bool:
    # pydantic adds the tried member type to the location of union errors
    return isinstance(part, str) and (
        part.startswith(("function-", "literal[", "constrained-")) or part in {"int", "str", "float", "bool"}
    )


def _dedupe(problems: list[tuple[str, str]]) -> list[tuple[str, str]]:
    seen: dict[str, str] = {}
    for path, message in problems:
        seen.setdefault(path, message)
    return list(seen.items())


def _lookup(data: Any, loc: list[Any]) -> Any:
    for part in loc:
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return None
    return data


def _strip_unknown(model: type[BaseModel], data: Any, loc: tuple[Any, ...], unknown: list[str]) -> Any:
    if not isinstance(data, dict):
        return data
    cleaned: dict[str, Any] = {}
    for key, value in data.items():
        field = model.model_fields.get(str(key))
        if field is None:
            unknown.append(key_path((*loc, key)))
            continue
        cleaned[key] = _strip_value(field.annotation, value, (*loc, key), unknown)
    return cleaned


def _strip_value(annotation: Any, value: Any, loc: tuple[Any, ...], unknown: list[str]) -> Any:
    nested = _nested_model(annotation)
    if nested is None:
        return value
    kind, sub = nested
    if kind == "model" and isinstance(value, dict):
        return _strip_unknown(sub, value, loc, unknown)
    if kind == "list" and isinstance(value, list):
        return [_strip_unknown(sub, item, (*loc, i), unknown) for i, item in enumerate(value)]
    if kind == "dict" and isinstance(value, dict):
        return {k: _strip_unknown(sub, v, (*loc, k), unknown) for k, v in value.items()}
    return value


def _nested_model(annotation: Any) -> tuple[str, type[BaseModel]] | None:
    """Find the model inside Optional[...], list[...], dict[str, ...] or Annotated[...]."""
    origin = typing.get_origin(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "model", annotation
    if origin is typing.Annotated:
        for meta in annotation.__metadata__:
            if isinstance(meta, KeysOf):
                return "model", meta.model
        return _nested_model(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = _nested_model(arg)
            if found:
                return found
        return None
    if origin is list:
        inner = _nested_model(typing.get_args(annotation)[0])
        return ("list", inner[1]) if inner and inner[0] == "model" else None
    if origin is dict:
        inner = _nested_model(typing.get_args(annotation)[1])
        return ("dict", inner[1]) if inner and inner[0] == "model" else None
    return None


def load_profile(path: Path) -> Profile:
    return validate(Profile, read_yaml_file(path), str(path), strict_keys=False)


def load_profile_text(text: str, source: str) -> Profile:
    return validate(Profile, parse_yaml(text, source), source, strict_keys=False)


def load_overlay(path: Path) -> TopologyOverlay:
    return validate(TopologyOverlay, read_yaml_file(path), str(path), strict_keys=True)


def load_surfaces(path: Path) -> dict[str, dict[str, Any]]:
    """The surfaces file's settings, per surface only the keys it gives (``--disable``/``--fail`` go over them)."""
    document = validate(SurfacesFile, read_yaml_file(path), str(path), strict_keys=True)
    return {name: patch.model_dump(exclude_none=True) for name, patch in document.surfaces.items()}


def load_override(path: Path) -> Override:
    """A missing or blank override file means "no overrides"."""
    return read_override(path)[1]


def read_override(path: Path) -> tuple[dict[str, Any], Override]:
    """The override file's document as written, and validated; a missing or blank file means "no overrides"."""
    try:
        text = utf8_text(read_bounded(path, MAX_DOCUMENT_BYTES), path)
    except FileNotFoundError:
        return {}, Override()
    if not text.strip():
        return {}, Override()
    doc = parse_yaml(text, str(path))
    return doc, validate(Override, doc, str(path), strict_keys=True)
