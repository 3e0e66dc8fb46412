"""The built-in profiles, shipped once, inside this package."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError

if TYPE_CHECKING:
    from .profile import Profile

BUILTIN_PROFILES = ("a100", "h100", "h200", "b200", "gb200", "gb300", "l40s", "l4", "a10g", "t4")
DEFAULT_PROFILE = "h100"
#: the package is always a directory on disk (its native libraries cannot be loaded from a zip), so the
#: profiles are files: a node's fingerprints stat them, and importlib.resources is not needed to find them
PROFILES_DIR = Path(__file__).parent / "profiles"


def builtin_path(name: str) -> Path:
    if name not in BUILTIN_PROFILES:
        raise ConfigError(
            "--profile", [("", f"unknown profile {name!r}; available profiles: {', '.join(BUILTIN_PROFILES)}")]
        )
    return PROFILES_DIR / f"{name}.yaml"


def builtin_text(name: str) -> str:
    return builtin_path(name).read_text(encoding="utf-8")


def load_builtin(name: str) -> Profile:
    from .loader import load_profile_text  # pydantic: not for a caller that only needs the names or paths

    return load_profile_text(builtin_text(name), f"{name}.yaml")
