"""Supported graphics clocks as real boards list them: a ladder of equal steps from the lowest clock up.

The steps may be fractional (Blackwell boards step 7.5 MHz: 120, 127, 135, 142, ...): each rung is the
lowest rung plus a whole number of steps, rounded down to the MHz (the lowest rung itself may be
fractional: 157.5 MHz lists as 157). The state file carries a ladder as its lowest rung and step in kHz
and its rung count; the library lists it again from the highest rung down.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple


class Ladder(NamedTuple):
    lowest_khz: int
    step_khz: int
    rungs: int

    def clocks(self) -> list[int]:
        """The rungs from the highest down, in MHz (what nvmlDeviceGetSupportedGraphicsClocks lists)."""
        return [(self.lowest_khz + self.step_khz * rung) // 1000 for rung in reversed(range(self.rungs))]


@lru_cache(maxsize=64)  # each render asks again for the same few boards' lists
def ladder(clocks: tuple[int, ...]) -> Ladder | None:
    """The ladder of ``clocks`` (highest first; none: an empty ladder), or None when they are not one."""
    if not clocks:
        return Ladder(0, 0, 0)
    lowest = clocks[-1] * 1000
    if len(clocks) == 1:
        return Ladder(lowest, 0, 1)
    # the two lowest steps together are a whole number of MHz even when one step is not (7.5 MHz)
    span = clocks[-3] - clocks[-1] if len(clocks) > 2 else clocks[-2] - clocks[-1]
    step_khz = span * 1000 // (2 if len(clocks) > 2 else 1)
    for fraction_khz in range(0, 1000, 100):
        found = Ladder(lowest + fraction_khz, step_khz, len(clocks))
        if step_khz > 0 and found.clocks() == list(clocks):
            return found
    return None
