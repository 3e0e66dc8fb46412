"""Where the built mock libraries live (``make -C native install`` puts them here)."""

from __future__ import annotations

import os
from pathlib import Path

NATIVE_DIR = Path(__file__).parent.parent / "_native"


def native_dir() -> Path | None:
    """Directory holding libnvidia-ml.so.* ($MOKKA_NATIVE_DIR overrides); None if not built."""
    override = os.environ.get("MOKKA_NATIVE_DIR")
    directory = Path(override) if override else NATIVE_DIR
    return directory if directory.is_dir() else None
