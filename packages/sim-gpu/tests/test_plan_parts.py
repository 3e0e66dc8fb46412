"""A change builds again only the plan parts that read it, and stages exactly what a full build would.

``render`` takes each gpu plan part the change does not read from the render before
(``mokka_core.stage.plan_memo``); the part declarations are checked field by field by the sim
contract (``test_cli.py``).  Here a node takes many ctl-like changes, and after each the staged plan
must be the one a build from nothing makes for the node as recorded, and the staged tree must hold it.
"""

from __future__ import annotations

import random
import subprocess
import sys
from collections import Counter

import pytest

from mokka_core import Node
from mokka_core.ctl import mig
from mokka_core.errors import CtlError
from mokka_core.stage import snapshot
from mokka_core.stage.native import native_dir
from mokka_core.stage.render import context, installed_surfaces, plan_digest, with_contributions
from mokka_core.stage.surface import PlanPart
from mokka_sim_gpu import surface as gpu_surface

if native_dir() is None:
    pytest.skip("mock libnvidia-ml not built (make -C native install)", allow_module_level=True)

GPUS = 4


def random_change(rng: random.Random) -> tuple[str, ...]:
    """One nvml-mock-ctl command: mostly readings, with the faults, settings and surface states that
    change the other parts (the /proc files, the loaded modules, the kernel log, everything)."""
    gpu = rng.choice([str(n) for n in range(GPUS)] + ["all"])
    return rng.choice([
        ("temp", gpu, str(rng.randrange(20, 95))),
        ("temp", gpu, str(rng.randrange(20, 95))),
        ("power", gpu, str(rng.randrange(100, 600))),
        ("util", gpu, str(rng.randrange(0, 100)), "--memory", str(rng.randrange(0, 100))),
        ("clocks", gpu, str(rng.randrange(500, 1900))),
        ("ecc", gpu, "--correctable", str(rng.randrange(1, 9))),
        ("fail", gpu, rng.choice(["lost", "fallen-off-bus", "healthy", "ecc-uncorrectable"])),
        ("xid", gpu, rng.choice(["13", "31", "48", "79"])),
        ("set", gpu, f"persistence_mode={rng.choice(['enabled', 'disabled'])}"),
        ("set", gpu, f"vbios_version=96.00.{rng.randrange(10, 99)}.00.01"),
        rng.choice([("disable", "pci"), ("enable", "pci"), ("fail-surface", "gpu"), ("heal", "gpu"),
                    ("fail-surface", "pci"), ("heal", "pci")]),
        ("reset", gpu),
    ])


def staged_as_built(node: Node) -> list[str]:
    """What differs between the staged gpu plan and one built from nothing for the node as recorded."""
    snap = snapshot.load(node.root)
    assert snap is not None
    recorded = snap.node()
    surfaces = installed_surfaces()
    ctx = with_contributions(context(node.root), recorded, surfaces)
    gpu = surfaces["gpu"]
    problems = gpu.check(recorded, ctx)
    if snap.digests.get("gpu") != plan_digest(gpu.plan(recorded, ctx)):
        problems.append("the staged plan's digest is not the digest of the plan built from nothing")
    return problems


def test_a_change_stages_what_a_full_build_stages(monkeypatch: pytest.MonkeyPatch) -> None:
    built: Counter[str] = Counter()  # by the changes, not by the checks

    def counted(part: PlanPart) -> PlanPart:
        def build(*args):  # type: ignore[no-untyped-def]
            built[part.name] += 1
            return part.build(*args)

        return part._replace(build=build)

    parts, counting = gpu_surface.PARTS, tuple(counted(part) for part in gpu_surface.PARTS)
    rng = random.Random(16)
    with Node("h100", gpus=GPUS) as node:
        for step in range(80):
            words = random_change(rng)
            monkeypatch.setattr(gpu_surface, "PARTS", counting)
            try:
                node.ctl(*words)
            except CtlError:
                continue  # refused (a value out of range on this board): nothing changed
            finally:
                monkeypatch.setattr(gpu_surface, "PARTS", parts)
            assert staged_as_built(node) == [], f"step {step}: {' '.join(words)}"
        # another process changes the node: this one's next change starts from what that one staged
        node.ctl("reset")
        node.ctl("temp", "0", "64")
        other = subprocess.run([sys.executable, "-m", "mokka_core.ctl", "--root", str(node.root), "fail", "1", "lost"],
                               capture_output=True, text=True, timeout=60)
        assert other.returncode == 0, other.stderr
        node.ctl("temp", "0", "65")
        assert staged_as_built(node) == [], "after another process's change"
        # the setter record changes under the node (pynvml made a MIG instance): the next change follows it
        node.ctl("reset")
        node.ctl("mig", "0", "on")
        node.ctl("temp", "0", "60")
        monkeypatch.setattr(mig, "follow_settings", lambda root, surfaces=None: None)
        node.ctl("mig", "0", "create", "1g.10gb")
        node.ctl("temp", "0", "66")
        assert staged_as_built(node) == [], "after a MIG instance made by the library"
    # the checks above would not see a stale part if every part were built every time
    assert built["kernel-log"] < built["nvml-state"] / 2, built
    assert built["proc"] < built["nvml-state"] / 2, built
