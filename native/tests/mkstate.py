"""State files for the native tests, rendered by mokka-core from its built-in profiles.

`make_state("h100")` returns the state file mokka-core renders for the built-in h100 profile (8 GPUs),
with the keys of the installed surfaces (sim-nvlink: links; sim-fabricmanager: the fabric state, here
as on a node whose fabric manager has trained the fabric);
`n` changes the GPU count (default: the profile's, four for the tests' T4 node). `overrides` maps
full keys (e.g. "device.3.lost") to values, None removes a key; `events` [(seq, device, xid)]
replaces the file's events.

This is the one module of the native tests (and bench/) that imports mokka-core.
"""
from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

try:  # mokka-core installed (tox, the venv) or from the source tree
    import mokka_core  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "packages" / "mokka-core" / "src"))

from mokka_core.model.apply import apply
from mokka_core.model.spec import NodeSpec
from mokka_core.stage import nvml_key_lookup, nvml_keys, render
from mokka_core.stage.nvml_keys import HEADER
from mokka_core.stage.nvml_view import render_nvml_state
from mokka_core.testing import consumers

__all__ = ["consumers", "make_state", "nvml_key_lookup", "nvml_keys", "rendered", "write_state"]

GPUS = {"t4": 4}  # the tests' T4 node has four boards (the profile describes a single-GPU machine)


@functools.cache
def rendered(shape: str = "h100", n: int | None = None) -> tuple[tuple[str, str], ...]:
    """(key, value) of the state file of built-in profile `shape` with `n` GPUs, in file order."""
    node = NodeSpec(profile=shape, gpus=n or GPUS.get(shape)).resolve()
    if node.gpus[0].config.fabric is not None:
        node = apply(node, {"all": {"fabric": {"state": "completed"}}})
    ctx = render.context(Path("/nonexistent"), booted_ms=0)
    ctx = render.with_contributions(ctx, node, render.installed_surfaces())
    text = render_nvml_state(node, ctx.nvml)
    lines = text.splitlines()
    assert lines[0] == HEADER and lines[-1] == "end"
    return tuple(tuple(line.split("=", 1)) for line in lines[1:-1] if line and not line.startswith("#"))


def make_state(shape: str = "h100", n: int | None = None, overrides: dict | None = None,
               events: list[tuple[int, int, int]] | None = None) -> str:
    kv: dict[str, object] = dict(rendered(shape, n))
    for k, v in (overrides or {}).items():
        if v is None:
            kv.pop(k, None)
        else:
            kv[k] = v
    if events is not None:
        kv = {k: v for k, v in kv.items() if not k.startswith("event.")}
        for idx, (seq, dev, xid) in enumerate(events):
            kv.update({f"event.{idx}.seq": seq, f"event.{idx}.device": dev, f"event.{idx}.type": 8,
                       f"event.{idx}.data": xid})
    return "\n".join([HEADER, *(f"{k}={v}" for k, v in kv.items()), "end"]) + "\n"


def write_state(path: os.PathLike | str, text: str) -> None:
    """Atomic replace (temp file in the same directory + rename), like mokka-core does."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.stdout.write(make_state(sys.argv[1] if len(sys.argv) > 1 else "h100"))
