"""``Value``: the base of every resolved class — immutable, compared and hashed by its fields, cheap to import.

The classes are written out in full (``config.py`` by ``schema/codegen.py``, ``node.py`` by hand)
rather than made by ``dataclasses`` at import time, which for the hundred classes of a node costs
more than ``nvml-mock-ctl``'s whole latency budget.  A class lists its fields in ``__slots__`` and
sets them in a keyword-only ``__init__``; the defaults are that ``__init__``'s.
"""

from __future__ import annotations

from typing import Any, Self


class Value:
    __slots__: tuple[str, ...] = ()

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable (use .replace())")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __eq__(self, other: object) -> bool:
        if other is self:  # immutable: shared parts of two nodes compare without a walk
            return True
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self.__slots__)

    def __hash__(self) -> int:
        return hash((type(self), *(getattr(self, name) for name in self.__slots__)))

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{type(self).__name__}({fields})"

    def __copy__(self) -> Self:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Self:
        return self

    def replace(self, **changes: Any) -> Self:
        """A copy with ``changes``; the fields not named keep their values."""
        values = {name: getattr(self, name) for name in self.__slots__}
        values.update(changes)
        return type(self)(**values)


def defaults(cls: type) -> dict[str, Any]:
    """The default of each field that has one (the keyword-only defaults of its ``__init__``)."""
    return dict(cls.__init__.__kwdefaults__ or {})  # type: ignore[misc]
