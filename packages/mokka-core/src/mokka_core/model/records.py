"""The resolved node as plain data: what every surface reads, without pydantic.

A surface's plan reads a node by attribute (``node.gpus[0].config.thermal.temperature_gpu_c``)
and through a few helpers (``node.gpu(target)``, ``gpu.lost``, ``settings.active``).  The
pydantic models in ``state.py`` provide that after validating a profile; the records here
provide the very same over the JSON form of a resolved node (``NodeState.model_dump(mode="json")``),
so ``nvml-mock-ctl`` can re-render a node from its snapshot without importing pydantic, which
alone costs more than the ctl's whole latency budget.

The helpers live in the ``*Behaviour`` mixins, shared by the models and the records, so the two
forms cannot drift apart; ``tests/test_ctl_fast.py`` renders every surface from both and compares.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["GpuBehaviour", "GpuRecord", "NodeBehaviour", "NodeRecord", "Record", "SurfaceBehaviour",
           "SurfaceRecord", "normalise_bus_id"]


def normalise_bus_id(text: str) -> str | None:
    """``1b:00.0``, ``00000000:1B:00.0`` -> ``0000:1b:00.0``; None if it is not a bus id."""
    parts = text.lower().split(":")
    if len(parts) == 2:
        parts = ["0000", *parts]
    if len(parts) != 3:
        return None
    try:
        domain = int(parts[0], 16)
        bus = int(parts[1], 16)
        dev, fn = parts[2].split(".")
        return f"{domain:04x}:{bus:02x}:{int(dev, 16):02x}.{int(fn, 16)}"
    except ValueError:
        return None


class SurfaceBehaviour:
    if TYPE_CHECKING:  # fields of the model or record this is mixed into (no annotation at run time)
        enabled: bool
        state: str

    @property
    def active(self) -> bool:
        """Staged and healthy."""
        return self.enabled and self.state == "healthy"


class GpuBehaviour:
    if TYPE_CHECKING:
        config: Any

    @property
    def failure_mode(self) -> str:
        return str(self.config.failure.mode) if self.config.failure else "healthy"

    @property
    def lost(self) -> bool:
        return self.failure_mode in ("lost", "fallen_off_bus")


class NodeBehaviour:
    if TYPE_CHECKING:
        system: Any
        gpus: Any
        surfaces: Any

    @property
    def driver_version(self) -> str:
        return str(self.system.driver_version)

    def surface(self, name: str) -> Any:
        return self.surfaces[name]

    def gpu(self, target: str | int) -> Any:
        """Find a GPU by index, UUID or PCI bus id (any case, 4- or 8-digit domain)."""
        text = str(target).strip().lower()
        for gpu in self.gpus:
            if text.isdigit() and int(text) == gpu.index:
                return gpu
            if text == gpu.uuid.lower() or normalise_bus_id(text) == gpu.bus_id:
                return gpu
        raise LookupError(f"no GPU {target!r} on this node (GPUs: 0-{len(self.gpus) - 1})")


class Record:
    """Read-only attribute access to a JSON mapping; nested mappings are records, lists are tuples."""

    _data: dict[str, Any]

    def __init__(self, data: dict[str, Any]) -> None:
        object.__setattr__(self, "_data", data)

    def __getattr__(self, name: str) -> Any:
        # only called for a field not read before: the wrapped value is kept as an instance attribute,
        # so the next read is a plain attribute lookup (renderers read the same fields many times)
        try:
            value = wrap(self._data[name])
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no field {name!r}") from None
        object.__setattr__(self, name, value)
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is read-only")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Record) and self._data == other._data

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._data!r})"

    def plain(self) -> dict[str, Any]:
        """The JSON mapping behind the record (what ``model_dump(mode="json")`` gives for a model)."""
        return self._data


def wrap(value: Any) -> Any:
    if isinstance(value, dict):
        return Record(value)
    if isinstance(value, list):
        return tuple(wrap(item) for item in value)
    return value


class SurfaceRecord(SurfaceBehaviour, Record):
    pass


class GpuRecord(GpuBehaviour, Record):
    pass


class NodeRecord(NodeBehaviour, Record):
    """A resolved node read from its JSON form; ``gpus`` and ``surfaces`` hold the typed records."""

    def __init__(self, data: dict[str, Any]) -> None:
        super().__init__(data)
        object.__setattr__(self, "gpus", tuple(GpuRecord(gpu) for gpu in data["gpus"]))
        object.__setattr__(self, "surfaces", {name: SurfaceRecord(s) for name, s in data["surfaces"].items()})


def plain(value: Any) -> Any:
    """The JSON form of a model or a record."""
    if isinstance(value, Record):
        return value.plain()
    return value.model_dump(mode="json")
