"""The seven surfaces of a node, by name (plain constants: the resolved model imports them without pydantic)."""

from __future__ import annotations

from typing import Literal

SURFACES = ("gpu", "pci", "cdi", "imex", "nvlink", "fabricmanager", "ib")
SurfaceName = Literal["gpu", "pci", "cdi", "imex", "nvlink", "fabricmanager", "ib"]
SurfaceHealth = Literal["healthy", "failed"]
