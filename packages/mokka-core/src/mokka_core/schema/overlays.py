"""The layers over a profile: the topology overlay, the surfaces file and the runtime override file.

Merge order (DESIGN §1): profile < topology overlay < override ``all`` < override ``devices[<index>]``;
surface settings: the surfaces file < ``--disable``/``--fail`` < the override's ``surfaces``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, Field, field_validator

from .profile import DeviceConfig, Model, NonNeg
from .surfaces import SURFACES, SurfaceHealth, SurfaceName

__all__ = ["SURFACES", "Clique", "DevicePatch", "Domain", "KeysOf", "Override", "SurfaceHealth", "SurfaceName",
           "SurfacePatch", "SurfacesFile", "TopologyOverlay"]


class Clique(Model):
    id: NonNeg
    nodes: list[str]


class Domain(Model):
    name: str | None = None
    uuid: str
    cliques: list[Clique]

    @field_validator("uuid")
    @classmethod
    def _uuid(cls, value: str) -> str:
        digits = value.replace("-", "")
        if len(digits) != 32 or any(c not in "0123456789abcdefABCDEF" for c in digits):
            raise ValueError(f"must be a UUID (32 hex digits), got {value!r}")
        return value.lower()


class TopologyOverlay(Model):
    """ComputeDomain cliques: which NVLink domain (cluster UUID) and clique each node belongs to."""

    version: int = 1
    domains: list[Domain] = []

    def placement(self, node_name: str) -> tuple[str, int] | None:
        """(cluster uuid, clique id) of the first domain/clique listing ``node_name``."""
        for domain in self.domains:
            for clique in domain.cliques:
                if node_name in clique.nodes:
                    return domain.uuid, clique.id
        return None


@dataclass(frozen=True)
class KeysOf:
    """Marks a raw mapping whose keys must be ``model``'s; its values are checked once merged over the profile."""

    model: type[BaseModel]


#: A partial DeviceConfig: ``power: {current_draw_mw: 95000}`` is fine without the block's other fields.
DevicePatch = Annotated[dict[str, Any], KeysOf(DeviceConfig)]


class SurfacePatch(Model):
    enabled: bool | None = None
    state: SurfaceHealth | None = None


class SurfacesFile(Model):
    """The surface settings of ``mokka node up --surfaces-file`` (the chart's ``surfaces.yaml``); unknown keys
    are errors."""

    version: Annotated[int, Field(ge=1, le=1)] = 1
    surfaces: dict[SurfaceName, SurfacePatch] = {}


class Override(Model):
    """The runtime override file written by ``nvml-mock-ctl``; unknown keys are errors."""

    version: Annotated[int, Field(ge=1, le=1)] = 1
    surfaces: dict[SurfaceName, SurfacePatch] = {}
    all: DevicePatch | None = None
    devices: dict[str, DevicePatch] = {}

    @field_validator("devices", mode="before")
    @classmethod
    def _index_keys(cls, value: Any) -> Any:
        if isinstance(value, dict):
            for key in value:
                if not str(key).isdigit():
                    raise ValueError(f"device keys must be decimal GPU indices, got {key!r}")
            return {str(key): item for key, item in value.items()}
        return value
