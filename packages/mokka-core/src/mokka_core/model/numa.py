"""The board's NUMA layout folded onto the host's online CPUs, so every CPU list names a CPU that exists.

The profile keeps the real board's layout: the CPUs of each NUMA node (its root complexes'
``cpu_affinity``, else ``cores_per_numa`` per node) and the node each GPU and NIC sits on.  The
rule, a pure function of (board layout, host CPU list):

* a host that has every CPU the board names keeps the board's lists as they are;
* otherwise the host's online CPUs, in order, are split contiguously and evenly over the simulated
  nodes 0..N-1 (the first nodes take one more where it does not divide); with fewer CPUs than
  nodes, node k shares host CPU ``floor(k * C / N)``: 2 CPUs and 2 nodes give one CPU each, 1 CPU
  is shared by both;
* a CPU list of the board (a root complex's affinity) maps CPU by CPU: the i-th of its node's M
  CPUs becomes the ``floor(i * H / M)``-th of the node's H host CPUs, so a list covering its whole
  node covers the node's whole share.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

#: where the host's online CPUs are read (``model.spec``); a sysfs file, so its content is its fingerprint
HOST_CPUS_FILE = "/sys/devices/system/cpu/online"


def parse_cpulist(text: str) -> tuple[int, ...]:
    """``0-3,8`` -> (0, 1, 2, 3, 8), sorted, without repeats; ValueError names the bad part."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        try:
            low, high = int(first), int(last or first)
        except ValueError:
            raise ValueError(f"not a CPU list: {text.strip()!r}") from None
        if high < low:
            raise ValueError(f"not a CPU list: {text.strip()!r}")
        cpus.update(range(low, high + 1))
    if not cpus:
        raise ValueError(f"not a CPU list: {text.strip()!r}")
    return tuple(sorted(cpus))


def format_cpulist(cpus: Iterable[int]) -> str:
    """(0, 1, 2, 3, 8) -> ``0-3,8``: the kernel's ``%*pbl`` form."""
    ranges: list[list[int]] = []
    for cpu in sorted(set(cpus)):
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join(f"{low}" if low == high else f"{low}-{high}" for low, high in ranges)


def fold(host: Sequence[int], count: int) -> list[tuple[int, ...]]:
    """The host CPUs of each of ``count`` simulated NUMA nodes (see the module's rule)."""
    total = len(host)
    if total < count:
        return [(host[k * total // count],) for k in range(count)]
    share, extra = divmod(total, count)
    shares, start = [], 0
    for k in range(count):
        size = share + (1 if k < extra else 0)
        shares.append(tuple(host[start:start + size]))
        start += size
    return shares


class HostCpus:
    """The board's NUMA nodes (id -> its CPUs) as the host can honour them."""

    def __init__(self, board: Mapping[int, Iterable[int]], host: Sequence[int] | None) -> None:
        self._board = {node: tuple(sorted(cpus)) for node, cpus in sorted(board.items())}
        named = {cpu for cpus in self._board.values() for cpu in cpus}
        self._keep = host is None or named <= set(host)
        if self._keep:
            self.nodes = dict(self._board)
        else:
            assert host is not None
            self.nodes = dict(zip(self._board, fold(sorted(host), len(self._board)), strict=True))

    def cpus(self, node: int, board_cpus: Sequence[int]) -> tuple[int, ...]:
        """A board CPU list of ``node`` (a root complex's affinity) on the host."""
        if self._keep:
            return tuple(sorted(board_cpus))
        own, share = self._board[node], self.nodes[node]
        position = {cpu: i for i, cpu in enumerate(own)}
        return tuple(sorted({share[position[cpu] * len(share) // len(own)] for cpu in board_cpus if cpu in position}))
