"""``nvml-mock-ctl mig GPU on|off|create|destroy|list``: MIG partitions, changed as nvidia-smi changes them.

The change itself is the node's libnvidia-ml's (``stage.mig_engine``, in a child process): the same
validation, errors, placements and setter record as ``nvidia-smi -mig`` / ``mig -cgi … -C`` /
``-dci``/``-dgi``.  Then the surfaces that follow a partition are re-rendered (``restage``), as the
node daemon does when nvidia-smi changed it.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..stage.mig_partition import default_ci_profile
from .store import Refused

if TYPE_CHECKING:
    from ..model.node import Gpu, Node
    from ..stage.surface import Surface

ACTIONS = ("on", "off", "create", "destroy", "list")
EXAMPLE = "nvml-mock-ctl mig 0 on; nvml-mock-ctl mig 0 create 3g.40gb,1g.10gb; nvml-mock-ctl mig 0 destroy all"


def add_arguments(sub: Any) -> None:
    sub.add_argument("gpu", metavar="GPU", help="GPU: all, an index, a UUID or a PCI bus id, or a list of them")
    sub.add_argument("action", metavar="ACTION", choices=ACTIONS, help="on | off | create | destroy | list")
    sub.add_argument("what", nargs="*", metavar="ARG",
                     help="create: PROFILE[,PROFILE...] (names as nvidia-smi mig -lgip lists them, or ids); "
                          "destroy: GPU instance ids, or all")
    sub.add_argument("--no-ci", dest="ci", action="store_false",
                     help="create GPU instances only (default: each with its default compute instance, as -cgi … -C)")


def perform(root: Path, args: argparse.Namespace, surfaces: Mapping[str, Surface] | None = None) -> str:
    """Carry out one ``mig`` command on the node under ``root``; its message (raises Refused)."""
    from ..stage import mig_partition
    from .verbs import gpus_of

    node = _node(root)
    gpus = gpus_of(node, args.gpu)
    partitions = mig_partition.read(root)
    if args.action == "list":
        return "\n".join(_listing(gpu, partitions.get(gpu.index, ())) for gpu in gpus)
    for gpu in gpus:
        if not gpu.config.mig or not gpu.config.mig.gpu_instance_profiles:
            raise Refused(f"GPU {gpu.index} ({gpu.config.name}) does not support MIG")
    lines = []
    for gpu in gpus:
        request = _request(gpu, args, partitions.get(gpu.index, ()))
        if request is None:
            lines.append(f"GPU {gpu.index}: no GPU instances to destroy")
            continue
        lines.append(_message(gpu, request, _run(root, request)))
    follow_settings(root, surfaces)
    return "\n".join(lines)


def restore_layouts(root: Path, node: Node, target: str | None) -> bool:
    """After ``reset``: a GPU that boots partitioned (``mig.layout``) and has no GPU instance gets its
    layout again; True when one did."""
    from ..stage import mig_boot, mig_partition
    from ..stage.staging import StagingError
    from .verbs import gpus_of

    if not mig_boot.wanted(node):
        return False
    partitions = mig_partition.read(root)
    bare = [gpu.index for gpu in gpus_of(node, target or "all")
            if gpu.config.mig and gpu.config.mig.layout and not partitions.get(gpu.index)]
    try:
        mig_boot.restore(root, node, bare)
    except StagingError as exc:
        raise Refused(str(exc)) from None
    return bool(bare)


def follow_settings(root: Path, surfaces: Mapping[str, Surface] | None = None) -> None:
    """Re-render what follows the setter record (MIG partitions) after it changed."""
    from ..stage.render import installed_surfaces, render
    from ..stage.restage import restage
    from ..stage.store import NodeStore
    from .store import current

    chosen = surfaces if surfaces is not None else installed_surfaces(root=root)
    with NodeStore(root).lock():
        if restage(root, chosen) is None:  # the snapshot is stale: the node from its files
            now = current(root)
            render(root, now.node(), chosen, recorded=now.digests)


def _node(root: Path) -> Node:
    from ..stage import snapshot

    snap = snapshot.load(root)
    if snap is not None:
        return snap.node()
    from ..stage import nodefile

    return nodefile.load(root).resolve()


def _request(gpu: Gpu, args: argparse.Namespace, instances: Sequence[Any]) -> dict[str, Any] | None:
    if args.action in ("on", "off"):
        if args.what:
            raise Refused(f"mig {args.action} takes no arguments, got {' '.join(args.what)}")
        return {"op": "mode", "gpu": gpu.index, "on": args.action == "on"}
    if args.action == "create":
        names = [part for word in args.what for part in word.split(",") if part]
        if not names:
            raise Refused("mig create needs GPU-instance profiles, e.g. 3g.40gb,1g.10gb (nvidia-smi mig -lgip)")
        return {"op": "create", "gpu": gpu.index,
                "profiles": [_profile(gpu, name, args.ci) for name in names]}
    words = [part for word in args.what for part in word.split(",") if part]
    if words == ["all"]:
        ids = [gi.id for gi in instances]
        return {"op": "destroy", "gpu": gpu.index, "instances": ids} if ids else None
    if not words or not all(word.isdigit() for word in words):
        raise Refused("mig destroy takes GPU instance ids (nvidia-smi mig -lgi) or all, "
                      f"got {' '.join(words) or 'nothing'}")
    return {"op": "destroy", "gpu": gpu.index, "instances": [int(word) for word in words]}


def _profile(gpu: Gpu, name: str, with_ci: bool) -> list[int | None]:
    """[GPU-instance profile id, its default compute-instance profile] for a name (or an id) on ``gpu``."""
    assert gpu.config.mig is not None
    profiles = gpu.config.mig.gpu_instance_profiles
    for profile in profiles:
        if name in (profile.name, str(profile.id)):
            return [profile.id, default_ci_profile(profile.slices) if with_ci else None]
    known = ", ".join(f"{p.name} ({p.id})" for p in profiles)
    raise Refused(f"GPU {gpu.index} ({gpu.config.name}) has no GPU-instance profile {name!r}; it has {known}")


def _run(root: Path, request: dict[str, Any]) -> list[Any]:
    from ..stage import mig_engine
    from ..stage.paths import LIB_DIR, NVML_STATE_FILE

    library = root / LIB_DIR / "libnvidia-ml.so.1"
    if not library.exists():
        raise Refused(f"no NVML library staged at {library}: is the gpu surface enabled?")
    try:
        return mig_engine.run(library, root / NVML_STATE_FILE, request)
    except mig_engine.Refused as exc:
        raise Refused(f"refused, partition unchanged: {exc}") from None


def _message(gpu: Gpu, request: dict[str, Any], done: list[Any]) -> str:
    if request["op"] == "mode":
        state = "enabled" if request["on"] else "disabled"
        pending = "" if done[0] == 0 else " (pending: the GPU is in use; current after a GPU reset)"
        return f"ok: GPU {gpu.index}: MIG {state}{pending}"
    if request["op"] == "create":
        made = ", ".join(f"GI {gi}" + ("" if ci is None else f" (CI {ci})") for gi, ci in done)
        return f"ok: GPU {gpu.index}: created {made}"
    return f"ok: GPU {gpu.index}: destroyed GI {', '.join(str(gi) for gi in done)}"


def _listing(gpu: Gpu, instances: Sequence[Any]) -> str:
    profiles = gpu.config.mig.gpu_instance_profiles if gpu.config.mig else []
    if not instances:
        return f"GPU {gpu.index}: no GPU instances"
    lines = [f"GPU {gpu.index}:"]
    for gi in instances:
        name = profiles[gi.row].name if gi.row < len(profiles) else "?"
        cis = ", ".join(f"CI {ci.id} ({ci.slices} slices)" for ci in gi.compute) or "no compute instances"
        lines.append(f"  GI {gi.id}: {name}, placement {gi.start}; {cis}")
    return "\n".join(lines)
