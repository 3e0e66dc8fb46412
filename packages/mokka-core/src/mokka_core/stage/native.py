"""Where built native libraries live: mokka-core's mock libraries (``make -C native install`` puts them
here), and any package's own (a surface's shim), found the same way."""

from __future__ import annotations

import os
from pathlib import Path

NATIVE_DIR = Path(__file__).parent.parent / "_native"
NATIVE_DIR_ENV = "MOKKA_NATIVE_DIR"


def native_dir() -> Path | None:
    """Directory holding libnvidia-ml.so.* ($MOKKA_NATIVE_DIR overrides); None if not built."""
    override = os.environ.get(NATIVE_DIR_ENV)
    directory = Path(override) if override else NATIVE_DIR
    return directory if directory.is_dir() else None


def native_library(name: str, directory: Path | None = None, override_env: str | None = None) -> Path | None:
    """The built library ``name``: ``$override_env`` if set, else in ``directory`` (default: mokka-core's
    native directory); None if it has not been built."""
    override = os.environ.get(override_env) if override_env else None
    if override:
        path = Path(override)
    else:
        where = directory if directory is not None else native_dir()
        if where is None:
            return None
        path = where / name
    return path if path.is_file() else None


def native_program(name: str) -> Path | None:
    """The built program ``name`` (mokka-enter, mokka-proc-files), from the native bundle in use or else
    mokka-core's own (a bundle of sanitizer builds has only the programs under test); None if not built."""
    for directory in (native_dir(), NATIVE_DIR):
        if directory is not None and os.access(directory / name, os.X_OK):
            return directory / name
    return None
