"""Fault clocks: per-GPU faults that grow with wall-clock time, as node state.

The NVML library counts injected NVLink errors itself (``accrued + rate x (now - epoch)`` per
injected link), so a rendered state file needs only the clock, never the time of rendering.
The clock is part of the node's document (``nvlink_error.since_ms``/``accrued``): commands that
change it (``nvml-mock-ctl``) read the wall clock and write the counts so far into the document
(:func:`rebased_nvlink_errors`), and renderers stay pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from .node import Gpu, Node


class NvlinkErrorClock(NamedTuple):
    """Injected NVLink errors of one GPU as the state file carries them: rate (milli-errors/s per
    injected link), the wall-clock epoch (ms) it grows from, the injected links, errors before the epoch."""

    rate_milli: int = 0
    epoch_ms: int = 0
    inject: frozenset[int] = frozenset()
    accrued: Mapping[int, int] = MappingProxyType({})

    def at(self, now_ms: int) -> dict[int, int]:
        """Errors per link at ``now_ms`` (the library's formula)."""
        grown = self.rate_milli * max(0, now_ms - self.epoch_ms) // 1_000_000
        links = set(self.accrued) | set(self.inject)
        return {link: self.accrued.get(link, 0) + (grown if link in self.inject else 0) for link in links}

    def counts(self) -> bool:
        return bool(self.rate_milli or self.accrued)


def nvlink_error_clock(gpu: Gpu, booted_ms: int) -> NvlinkErrorClock:
    """The clock of ``gpu``; a rate given without ``since_ms`` grows from ``booted_ms`` (when the node
    came up). With neither known (a node rendered outside any root) the errors do not grow."""
    config = gpu.config.nvlink_error
    if config is None:
        return NvlinkErrorClock()
    accrued = MappingProxyType({link: n for link, n in enumerate(config.accrued) if n})
    epoch = config.since_ms or booted_ms
    rate_milli = round(config.rate * 1000) if epoch else 0
    wanted = set(config.links) if config.links else None
    inject = frozenset(link.link for link in gpu.links
                       if rate_milli and link.active and (wanted is None or link.link in wanted))
    if not inject:
        return NvlinkErrorClock(accrued=accrued)
    return NvlinkErrorClock(rate_milli, epoch, inject, accrued)


def rebased_nvlink_errors(before: Node, after: Node, now_ms: int, booted_ms: int,
                          base: Node | None = None) -> dict[int, dict[str, Any]]:
    """The ``nvlink_error`` values that keep each GPU's counts where a change alters its clock.

    A change of the rate, of the chosen links or of which links are active (a surface failed,
    a GPU lost) would otherwise re-count from the old epoch with the new slope; instead the
    counts at ``now_ms`` become ``accrued`` and the clock restarts at ``now_ms`` (rate 0 stops the
    growth and keeps the counts).  ``base``: the node without its override; a GPU whose block is
    back to the base's has been reset, and its counts go.  By GPU index; empty when no clock changed.
    """
    old = {gpu.index: gpu for gpu in before.gpus}
    unset = {gpu.index: gpu.config.nvlink_error for gpu in base.gpus} if base is not None else {}
    rebased: dict[int, dict[str, Any]] = {}
    for gpu in after.gpus:
        previous = old.get(gpu.index)
        if previous is None or (gpu.index in unset and gpu.config.nvlink_error == unset[gpu.index]):
            continue
        was, now = nvlink_error_clock(previous, booted_ms), nvlink_error_clock(gpu, booted_ms)
        if (was.rate_milli, was.inject) == (now.rate_milli, now.inject) or not (was.counts() or now.counts()):
            continue
        counts = was.at(now_ms)
        accrued = [counts.get(link, 0) for link in range(max(counts, default=-1) + 1)]
        while accrued and not accrued[-1]:
            accrued.pop()
        rebased[gpu.index] = {"nvlink_error.since_ms": now_ms, "nvlink_error.accrued": accrued}
    return rebased
