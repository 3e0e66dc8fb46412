"""The ``mokka-ib-responder`` service: the MAD responder of one simulated node, a small C program.

``native/ib-responder`` (``make -C native install`` puts it in mokka-core's native bundle) serves the
shim's socket and the fabric's TCP port (README "Serving"); it reads the node file this package stages
and is given the node's paths on its command line, never knowing a root itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mokka_core.errors import MokkaError
from mokka_core.stage.native import native_library

from .config import NODE_CONFIG, SOCKET

if TYPE_CHECKING:
    from pathlib import Path

PROGRAM = "mokka-ib-responder"
DEFAULT_FABRIC_DIR = "/run/mokka/ib-fabric"


class ResponderNotBuilt(MokkaError):
    """No built mokka-ib-responder program to run."""


def binary(native_dir: Path | None = None) -> Path:
    """The built responder in mokka-core's native bundle (``native_dir``, else $MOKKA_NATIVE_DIR or the bundle)."""
    program = native_library(PROGRAM, native_dir)
    if program is None:
        raise ResponderNotBuilt(f"ib: the {PROGRAM} service is not built (no {PROGRAM} in mokka_core/_native or "
                                "$MOKKA_NATIVE_DIR); run `make -C native install` first")
    return program


def command(root: Path, native_dir: Path | None = None) -> list[str]:
    """The responder of the node staged under ``root``: its node file and its socket."""
    return [str(binary(native_dir)), "--node-file", str(root / NODE_CONFIG), "--socket", str(root / SOCKET)]
