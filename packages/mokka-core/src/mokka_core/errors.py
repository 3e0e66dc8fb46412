"""Errors that name the file, the key path and the bad value."""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: nvml-mock-ctl imports this module before it knows it needs typing
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from typing import Any


class MokkaError(Exception):
    """Base class for errors shown to the user as one clear message (exit status 1)."""


class CtlError(MokkaError):
    """An ``nvml-mock-ctl`` command that was refused or not understood, run in-process (``Node.ctl``).

    The message is what the command line prints; ``status`` its exit status (1 refused, 2 usage).
    """

    def __init__(self, message: str, status: int = 1) -> None:
        self.message = message
        self.status = status
        super().__init__(message)


class ConfigError(MokkaError):
    """A profile, overlay or override that cannot be used.

    ``problems`` holds one ``(key path, message)`` pair per defect so every defect
    in a file is reported at once.
    """

    def __init__(self, source: str, problems: Sequence[tuple[str, str]]) -> None:
        self.source = source
        self.problems = list(problems)
        super().__init__("\n".join(self.lines()))

    def lines(self) -> list[str]:
        out = []
        for path, message in self.problems:
            out.append(f"{self.source}: {path}: {message}" if path else f"{self.source}: {message}")
        return out


class StateValueError(MokkaError, ValueError):
    """A node value the NVML library would refuse in its state file (the bounds of native/state-keys.toml)."""


def key_path(loc: Iterable[Any]) -> str:
    """('devices', 3, 'pci', 'bus_id') -> 'devices[3].pci.bus_id'."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
