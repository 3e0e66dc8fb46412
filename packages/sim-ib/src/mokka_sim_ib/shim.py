"""Where the built LD_PRELOAD shim lives, and the environment that puts a program on a simulated node."""

from __future__ import annotations

import os
from pathlib import Path

from .config import SOCKET

SHIM_NAME = "libmokka-ib.so"
NATIVE_DIR = Path(__file__).parent / "_native"  # `make -C packages/sim-ib/native install` puts it here


def shim_path() -> Path | None:
    """The shim ($MOKKA_IB_SHIM overrides); None if it has not been built."""
    override = os.environ.get("MOKKA_IB_SHIM")
    path = Path(override) if override else NATIVE_DIR / SHIM_NAME
    return path if path.is_file() else None


def shim_environment(root: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` plus LD_PRELOAD of the shim and the node's responder socket."""
    env = dict(os.environ if base is None else base)
    shim = shim_path()
    if shim is None:
        raise FileNotFoundError(f"{SHIM_NAME} is not built: run `make -C packages/sim-ib/native install`")
    preload = env.get("LD_PRELOAD", "")
    env["LD_PRELOAD"] = f"{shim}:{preload}" if preload else str(shim)
    env["MOKKA_IB_SOCKET"] = str(root / SOCKET)
    return env
