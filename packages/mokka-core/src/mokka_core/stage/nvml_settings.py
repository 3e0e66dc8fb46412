"""The NVML setter record: the device keys NVML setters changed on the node (``nvidia-smi -pl``, ``-e``,
``-r``, …), which the library overlays on the state file.

The library writes it (``native/src/settings.c``); here it is read for ``nvml-mock-ctl status`` and
cleared by ``reset``, under the same lock (``flock`` on ``<record>.lock``, mode 0600). Format and design:
native/README.md, "Settings".
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import MokkaError
from .nvml_keys import SETTINGS_HEADER
from .paths import NVML_SETTINGS_FILE
from .store import atomic_write, owner_lock

LOCK_FILE = f"{NVML_SETTINGS_FILE}.lock"
#: what the library may leave beside the state file: the record, the temp file it renames into place, its lock
RUNTIME_FILES = (NVML_SETTINGS_FILE, f"{NVML_SETTINGS_FILE}.tmp", LOCK_FILE)

Settings = dict[int, dict[str, str]]


def read(root: Path) -> Settings:
    """GPU index -> {key: value} of the record under ``root`` ({} without one)."""
    path = root / NVML_SETTINGS_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}
    # the library takes any byte but NUL in a value: one that is not UTF-8 is shown (and kept) as U+FFFD
    return parse(data.decode("utf-8", "replace"), path)


def parse(text: str, where: Path) -> Settings:
    lines = text.split("\n")
    if lines[0] != SETTINGS_HEADER or "end" not in lines:
        raise MokkaError(f"{where}: not an NVML setter record (first line {SETTINGS_HEADER!r}, last 'end')")
    out: Settings = {}  # a key the library does not know is kept, as it keeps it (from a newer library)
    for number, line in enumerate(lines[1:lines.index("end")], start=2):
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        scope, _, rest = key.partition(".")
        index, _, name = rest.partition(".")
        if not sep or scope != "device" or not index.isdigit() or not name:
            raise MokkaError(f"{where}: line {number}: expected device.<i>.<key>=value, got {line!r}")
        out.setdefault(int(index), {})[name] = value
    return out


def clear(root: Path, gpus: Iterable[int] | None = None) -> bool:
    """Drop the record (``gpus`` None) or those GPUs' settings; True when something was dropped."""
    path = root / NVML_SETTINGS_FILE
    if not path.parent.is_dir():
        return False
    with locked(root):
        try:
            current = read(root) if gpus is not None else None
        except MokkaError:  # the library ignores a record it cannot parse: removing it changes nothing else
            current = None
        if current is None or gpus is None:  # without reading it: reset recovers from any record
            if not path.exists():
                return False
            path.unlink()
            return True
        dropped = set(gpus) & set(current)
        if dropped:
            kept = {i: kv for i, kv in current.items() if i not in dropped}
            atomic_write(path, render(kept), durable=True)
        return bool(dropped)


def render(settings: Settings) -> str:
    lines = [SETTINGS_HEADER]
    lines += [f"device.{index}.{key}={value}" for index in sorted(settings) for key, value in settings[index].items()]
    return "\n".join([*lines, "end", ""])


@contextmanager
def locked(root: Path) -> Iterator[None]:
    """The writers' lock under ``root``, as the library takes it (a bounded wait, then :class:`NodeLocked`)."""
    with owner_lock(root / LOCK_FILE):
        yield
