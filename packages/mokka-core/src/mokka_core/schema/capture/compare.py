"""A real capture against a simulated node's ``nvidia-smi -q -x``, fact by fact.

The node facts (driver, CUDA, GPU count) are compared once; GPU facts compare the capture's GPU i
with the simulated GPU i, for the GPUs both have (a GPU count that differs is one mismatched fact).
A fact only one side has (an element one driver prints and the other does not) is not
comparable: counted, never a mismatch; so is an element the simulated nvidia-smi prints but has no
way to fill (:data:`UNFILLED_BY_OLDER_NVIDIA_SMI`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .facts import Capture

#: Elements nvidia-smi 535-555 prints as N/A whatever the library says (it makes no NVML call for
#: them; checked by LD_DEBUG=bindings): where the simulated side has N/A, they are not comparable.
UNFILLED_BY_OLDER_NVIDIA_SMI = {
    "addressing_mode": "nvidia-smi before 570 never calls nvmlDeviceGetAddressingMode",
}
NOT_AVAILABLE = "N/A"


@dataclass(frozen=True)
class Difference:
    path: str
    gpu: int | None  # None: a node fact
    captured: str
    simulated: str

    @property
    def where(self) -> str:
        return self.path if self.gpu is None else f"gpu[{self.gpu}]/{self.path}"


@dataclass(frozen=True)
class Comparison:
    matched: int
    differences: tuple[Difference, ...]
    not_comparable: int
    gpus_compared: int

    @property
    def comparable(self) -> int:
        return self.matched + len(self.differences)

    @property
    def score(self) -> float:
        return self.matched / self.comparable if self.comparable else 0.0

    def score_line(self) -> str:
        return f"fidelity {self.matched}/{self.comparable} ({100 * self.score:.1f}%)"

    def as_json(self) -> dict[str, Any]:
        return {
            "matched": self.matched,
            "comparable": self.comparable,
            "score": round(self.score, 4),
            "not_comparable": self.not_comparable,
            "gpus_compared": self.gpus_compared,
            "differences": [{"path": d.path, "gpu": d.gpu, "capture": d.captured, "simulated": d.simulated}
                            for d in self.differences],
        }


def compare(captured: Capture, simulated: Capture) -> Comparison:
    matched = not_comparable = 0
    differences: list[Difference] = []
    gpus = min(captured.gpu_count, simulated.gpu_count)
    pairs: list[tuple[int | None, dict[str, str], dict[str, str]]] = [
        (None, captured.node_facts(), simulated.node_facts())]
    pairs += [(i, captured.gpu_facts(i), simulated.gpu_facts(i)) for i in range(gpus)]
    for gpu, real, ours in pairs:
        not_comparable += len(real.keys() ^ ours.keys())
        for path in real.keys() & ours.keys():
            if ours[path] == NOT_AVAILABLE and path in UNFILLED_BY_OLDER_NVIDIA_SMI:
                not_comparable += 1
            elif real[path] == ours[path]:
                matched += 1
            else:
                differences.append(Difference(path, gpu, real[path], ours[path]))
    differences.sort(key=lambda d: (-1 if d.gpu is None else d.gpu, d.path))
    return Comparison(matched, tuple(differences), not_comparable, gpus)
