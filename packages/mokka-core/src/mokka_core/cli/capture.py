"""``mokka profile import`` and ``diff``: twin a real node from its ``nvidia-smi -q -x`` capture; check a twin.

The simulated side is what real nvidia-smi prints: a node is staged in a private temporary root
(as ``mokka_core.Node`` stages one: no root, no namespace) and the nvidia-smi its gpu surface
staged (the cached branch nearest the profile's driver, or the profile's ``system.nvidia_smi``)
runs against it with ``-q -x``.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..errors import MokkaError
from ..model.spec import NodeSpec
from .options import ProfileFileOpt, ProfileOpt

if TYPE_CHECKING:
    from ..schema.capture.compare import Comparison, Difference

# the capture parser, the comparison and staging are imported by these commands only, not by every mokka command

#: where the gpu surface stages nvidia-smi in a node's root
STAGED_NVIDIA_SMI = "usr/bin/nvidia-smi"
NVIDIA_SMI_TIMEOUT_S = 120

CaptureArg = Annotated[Path, typer.Argument(help="A real node's `nvidia-smi -q -x` output (driver 535-595).",
                                            show_default=False)]


def simulated_capture(spec: NodeSpec) -> str:
    """``nvidia-smi -q -x`` of the node ``spec`` resolves to, by the real nvidia-smi staged with it."""
    from ..run import command
    from ..stage import nvidia_smi
    from ..stage.paths import LIB_DIR, NVML_STATE_FILE

    with tempfile.TemporaryDirectory(prefix="mokka-diff-") as tmp:
        workdir = Path(tmp)
        plan = command.plan_node(spec, workdir / "root")
        if "gpu" not in plan.plans:
            raise MokkaError("no gpu surface on this node (mokka-sim-gpu installed and enabled): "
                             "nothing runs nvidia-smi")
        command.stage_node(plan, workdir)
        binary = plan.root / STAGED_NVIDIA_SMI
        if not binary.is_file():
            raise MokkaError(nvidia_smi.missing_message(nvidia_smi.closest_branch(plan.node.driver_version)))
        env = plan.needs.apply(os.environ)
        env["LD_LIBRARY_PATH"] = ":".join(filter(None, [str(plan.root / LIB_DIR), os.environ.get("LD_LIBRARY_PATH")]))
        env["MOKKA_NVML_STATE"] = str(plan.root / NVML_STATE_FILE)
        env["MOKKA_ROOT"] = str(plan.root)
        try:
            done = subprocess.run([str(binary), "-q", "-x"], env=env, capture_output=True, text=True,
                                  timeout=NVIDIA_SMI_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise MokkaError(f"nvidia-smi -q -x on the simulated node took over {NVIDIA_SMI_TIMEOUT_S} s") from None
        if done.returncode != 0:
            raise MokkaError(f"nvidia-smi -q -x on the simulated node exited {done.returncode}: "
                             f"{(done.stderr or done.stdout).strip()[:300]}")
        return done.stdout


def profile_diff(
    capture: CaptureArg,
    profile: ProfileOpt = None,
    profile_file: ProfileFileOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON.")] = False,
) -> None:
    """Compare a real capture with a simulated node, fact by fact, and print a fidelity score.

    Model facts are the elements that describe the board and its driver; serials, UUIDs, bus
    positions and the moment's readings are not compared.  GPU i of the capture is compared with
    GPU i of the node (the GPU count is one fact).  An element only one side prints (the
    nvidia-smi branches differ) is not comparable: counted, not a difference.  Without --profile or
    --profile-file the closest built-in board is simulated.  Exit 0 whatever
    the score (the diff is a report), 1 on a bad capture or profile.

    Example: mokka profile diff reference/captures/qx-h100.xml --profile h100
    """
    from ..schema.capture.compare import compare
    from ..schema.capture.facts import parse_capture, read_capture
    from ..schema.capture.importer import closest_builtin  # the profile schema: not for every mokka command

    real = read_capture(capture)  # a bad capture is refused before a node is staged
    if profile is None and profile_file is None:
        profile = closest_builtin(real)
    label = str(profile_file) if profile_file is not None else f"profile {profile}"
    spec = NodeSpec(profile=profile, profile_file=profile_file)
    simulated = parse_capture(simulated_capture(spec), "nvidia-smi -q -x of the simulated node")
    result = compare(real, simulated)
    if as_json:
        typer.echo(json.dumps({"capture": str(capture), "profile": label, **result.as_json()}, indent=2))
        return
    typer.echo(f"{capture}: {real.gpu_count} GPUs captured, {simulated.gpu_count} simulated "
               f"({label}); "
               f"GPU i compared with GPU i for {result.gpus_compared}")
    for where, difference in grouped(result):
        typer.echo(f"  {where}: capture {shown(difference.captured)}, simulated {shown(difference.simulated)}")
    typer.echo(f"not comparable: {result.not_comparable} (elements only one nvidia-smi prints)")
    typer.echo(result.score_line())


def shown(value: str, limit: int = 80) -> str:
    """A value for one line of the report (--json has it whole)."""
    return repr(value) if len(value) <= limit else repr(value[:limit]) + f"... ({len(value)} characters)"


def grouped(result: Comparison) -> list[tuple[str, Difference]]:
    """Each difference once, as ``gpu[*]/path`` where every compared GPU differs the same way."""
    by_fact: dict[tuple[str, str, str], list[Difference]] = defaultdict(list)
    for difference in result.differences:
        by_fact[(difference.path, difference.captured, difference.simulated)].append(difference)
    out = []
    for same in by_fact.values():
        if same[0].gpu is not None and len(same) == result.gpus_compared > 1:
            out.append((f"gpu[*]/{same[0].path}", same[0]))
        else:
            out.extend((d.where, d) for d in same)
    return out


def profile_import(
    capture: CaptureArg,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Profile file to write (default: stdout).",
                                                show_default=False)] = None,
    name: Annotated[str | None, typer.Option("--name", help="The profile's name (default: <board>-twin).",
                                             show_default=False)] = None,
) -> None:
    """Turn a real capture into a profile that twins the node: its GPU count and every value the XML states.

    It starts from the closest built-in board (by PCI device id, then product name); what the XML
    cannot say (topology, NVLink, NUMA, InfiniBand, the MIG table) comes from that board, listed in a
    comment at the top of the file with the facts the profile format has no key for.  Check the
    twin with `mokka profile diff CAPTURE --profile-file PROFILE`.

    Example: mokka profile import reference/captures/qx-a100.xml -o a100-twin.yaml
    """
    from ..schema.capture.facts import read_capture
    from ..schema.capture.importer import import_profile  # the profile schema: not for every mokka command
    from ..schema.loader import load_profile_text
    from ..stage.store import atomic_write

    real = read_capture(capture)
    imported = import_profile(real, name)
    text = imported.yaml()
    load_profile_text(text, str(output or "the imported profile"))  # what validate accepts, or a bug here
    if output is None:
        typer.echo(text, nl=False)
        return
    atomic_write(output, text.encode())
    typer.echo(f"{output}: {real.gpu_count} x {imported.profile['device_defaults'].get('name', imported.board)}, "
               f"driver {real.node['driver_version']}, from the built-in {imported.board}", err=True)
