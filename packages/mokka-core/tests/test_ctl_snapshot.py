"""nvml-mock-ctl changes a node from its snapshot (no pydantic) exactly as resolving its files would.

For every built-in profile and every verb, the node the ctl makes from the snapshot must be the
node its files resolve to once the change is written, with the same plan for every surface
installed here (all seven in the e2e environment), and a refusal must read the same whether the
snapshot or the files were used.  A missing, stale or nonsense snapshot is only a cache miss.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mokka_core.ctl.cli import build_parser, execute, mutation
from mokka_core.ctl.report import node_summary
from mokka_core.ctl.store import Refused, apply
from mokka_core.model.apply import ApplyError
from mokka_core.model.apply import apply as apply_override
from mokka_core.model.codec import decode, encode
from mokka_core.model.config import GpuConfig
from mokka_core.model.resolve import resolve_base
from mokka_core.model.spec import NodeSpec
from mokka_core.node.settings import NodeSettings
from mokka_core.schema.builtin import BUILTIN_PROFILES, builtin_text
from mokka_core.schema.merge import merge_all
from mokka_core.schema.profile import DeviceConfig
from mokka_core.stage import nodefile, snapshot
from mokka_core.stage.render import build_plans, context, installed_surfaces, plan_digest, with_contributions
from mokka_core.stage.store import OVERRIDE_FILE, SNAPSHOT
from mokka_core.stage.surface import Surface
from mokka_core.testing.runner import DaemonRunner, ProbeSurface, nvml_surface

# GPU 0 and 1 of a two-GPU node; {uuid1} and {bus0} are filled in from the node
COMMANDS = [
    ("temp", "0", "77"),
    ("temp", "all", "60"),
    ("temp", "{uuid1}", "81"),
    ("power", "1", "50.5"),
    ("power", "{bus0}", "40"),
    ("util", "all", "90", "--memory", "40"),
    ("clocks", "0", "500", "--memory", "600"),
    ("throttle", "0", "thermal", "power"),
    ("throttle", "all", "none"),
    ("pstate", "1", "P2"),
    ("ecc", "0", "--correctable", "3", "--uncorrectable", "1"),
    ("ecc", "1", "--correctable", "5", "--aggregate"),
    ("remapped-rows", "0", "--uncorrectable", "2", "--pending"),
    ("xid", "1", "13"),
    ("fail", "1", "fallen-off-bus"),
    ("fail", "0", "ecc-uncorrectable"),
    ("fail", "1", "healthy"),
    ("fail", "all", "lost"),
    ("fail", "all", "healthy"),
    ("fabric-health", "0", "degraded_bandwidth", "no_partition"),  # refused where there is no fabric
    ("nvlink-error", "0", "250", "--links", "0,1"),  # refused where there is no NVLink
    ("power", "0", "5000"),  # refused: over every GPU's power limit
    ("temp", "7", "50"),  # refused: no GPU 7
]


def surfaces() -> dict[str, Surface]:
    return {"gpu": nvml_surface(), **installed_surfaces(), "probe": ProbeSurface()}


def start(root: Path, profile: str, chosen: dict[str, Surface]) -> DaemonRunner:
    spec = NodeSpec(profile=profile, gpus=2)
    return DaemonRunner(NodeSettings(root=root, spec=spec, supervise=False, watch=False), surfaces=chosen)


def parse(root: Path, words: tuple[str, ...]) -> Any:
    snap = snapshot.load(root)
    assert snap is not None, "the daemon wrote no snapshot"
    gpus = snap.base.gpus
    filled = [w.format(uuid1=gpus[1].uuid, bus0=gpus[0].bus_id.upper()) for w in words]
    args = build_parser().parse_args(filled)
    return args, mutation(args)


def digests(node: Any, chosen: dict[str, Surface], root: Path) -> dict[str, str]:
    ctx = with_contributions(context(root), node, chosen)  # pure: the same node renders the same plans
    return {name: plan_digest(plan) for name, plan in build_plans(node, chosen, ctx).items()}


def from_files(root: Path) -> Any:
    return nodefile.load(root).resolve()


def attempt(root: Path, mutate: Any, chosen: dict[str, Surface]) -> Any:
    try:
        return apply(root, mutate, surfaces=chosen)
    except Refused as exc:
        return f"refused: {exc}"


@pytest.mark.parametrize("profile", BUILTIN_PROFILES)
def test_a_change_from_the_snapshot_is_the_node_its_files_resolve_to(tmp_path: Path, profile: str) -> None:
    root = tmp_path / "root"
    chosen = surfaces()
    with start(root, profile, chosen):
        for words in COMMANDS:
            _, mutate = parse(root, words)
            outcome = attempt(root, mutate, chosen)
            if isinstance(outcome, str):  # the same refusal without the snapshot
                (root / SNAPSHOT).unlink()
                assert attempt(root, mutate, chosen) == outcome, words
                assert snapshot.load(root) is None  # nothing was rendered, nothing recorded
                apply(root, mutation(build_parser().parse_args(["temp", "0", "40"])), surfaces=chosen)
                continue
            assert outcome.from_snapshot, words
            resolved = from_files(root)
            assert outcome.node == resolved, words
            assert digests(outcome.node, chosen, root) == digests(resolved, chosen, root), words
            recorded = snapshot.load(root)
            assert recorded is not None, f"{words}: the recorded snapshot is stale"
            assert recorded.node() == resolved, words


@pytest.mark.parametrize("profile", BUILTIN_PROFILES)
def test_status_from_the_snapshot_reads_as_from_the_files(tmp_path: Path, profile: str) -> None:
    root = tmp_path / "root"
    with start(root, profile, surfaces()):
        for words in (("fail", "1", "ecc-uncorrectable"), ("throttle", "0", "thermal"), ("xid", "0", "31"),
                      ("nvlink-error", "0", "5"), ("fabric-health", "1", "route_recovery")):
            _, mutate = parse(root, words)
            attempt(root, mutate, surfaces())  # refused where there is no NVLink or no fabric
        recorded = snapshot.load(root)
        assert recorded is not None
        assert node_summary(recorded.node(), root) == node_summary(from_files(root), root)


def test_stale_missing_or_nonsense_snapshots_resolve_the_files(tmp_path: Path) -> None:
    root = tmp_path / "root"
    chosen = surfaces()
    with start(root, "h100", chosen):
        _, mutate = parse(root, ("temp", "0", "70"))
        assert apply(root, mutate, surfaces=chosen).from_snapshot

        (root / OVERRIDE_FILE).write_text("version: 1\nall:\n  thermal:\n    temperature_gpu_c: 33\n")  # by hand
        assert snapshot.load(root) is None
        outcome = apply(root, mutate, surfaces=chosen)
        assert not outcome.from_snapshot
        assert [gpu.config.thermal.temperature_gpu_c for gpu in from_files(root).gpus] == [70, 33]
        assert apply(root, mutate, surfaces=chosen).from_snapshot  # the files' node was recorded

        (root / SNAPSHOT).write_text('{"format": 2, "inputs": [')
        assert snapshot.load(root) is None
        assert not apply(root, mutate, surfaces=chosen).from_snapshot

        data = json.loads((root / SNAPSHOT).read_text())  # well-formed, fresh, but nonsense
        for gpu in data["base"]["gpus"]:
            del gpu["uuid"]
        (root / SNAPSHOT).write_text(json.dumps(data))
        assert snapshot.load(root) is None
        assert not apply(root, mutate, surfaces=chosen).from_snapshot

        (root / SNAPSHOT).unlink()
        assert not apply(root, mutate, surfaces=chosen).from_snapshot


def test_a_process_that_keeps_its_snapshot_in_memory_reads_another_writers(tmp_path: Path) -> None:
    """The daemon and Node.ctl keep the snapshot they wrote decoded; one another writer replaced is read."""
    root = tmp_path / "root"
    chosen = surfaces()
    with start(root, "h100", chosen):
        _, mutate = parse(root, ("temp", "0", "70"))
        apply(root, mutate, surfaces=chosen)
        kept = snapshot.load(root)
        assert kept is not None and kept.node().gpus[0].config.thermal.temperature_gpu_c == 70
        kept.override_doc.clear()  # a caller's copy: what is kept is not changed through it
        assert snapshot.load(root).node().gpus[0].config.thermal.temperature_gpu_c == 70
        data = json.loads((root / SNAPSHOT).read_text())
        data["override_doc"]["devices"]["0"]["thermal"]["temperature_gpu_c"] = 71
        data["digests"] = {name: "0" * 64 for name in data["digests"]}
        replacement = root / "snapshot.new"
        replacement.write_text(json.dumps(data))
        os.replace(replacement, root / SNAPSHOT)  # another writer
        assert snapshot.load(root).node().gpus[0].config.thermal.temperature_gpu_c == 71
        assert set(snapshot.record(root)["digests"].values()) == {"0" * 64}


def test_a_changed_profile_file_makes_the_snapshot_stale(tmp_path: Path) -> None:
    profile = tmp_path / "custom.yaml"
    profile.write_text(builtin_text("t4"))
    root = tmp_path / "root"
    spec = NodeSpec(profile_file=profile, gpus=2)
    with DaemonRunner(NodeSettings(root=root, spec=spec, supervise=False, watch=False), surfaces=surfaces()):
        assert snapshot.load(root) is not None
        profile.write_text(builtin_text("t4").replace("name: Tesla T4", "name: Tesla T4 (edited)"))
        assert snapshot.load(root) is None
        outcome = apply(root, mutation(build_parser().parse_args(["temp", "0", "50"])), surfaces=surfaces())
        assert not outcome.from_snapshot and outcome.node.gpus[0].config.name.endswith("(edited)")


def test_set_has_its_values_validated_and_made_canonical(tmp_path: Path) -> None:
    root = tmp_path / "root"
    with start(root, "h100", surfaces()):
        ctl = ["--root", str(root)]
        assert execute([*ctl, "set", "0", "fan.speed_percent=700"], surfaces=surfaces()) == 1
        assert execute([*ctl, "set", "0", "no_such.key=1"], surfaces=surfaces()) == 1
        assert not (root / OVERRIDE_FILE).exists() or "700" not in (root / OVERRIDE_FILE).read_text()
        assert execute([*ctl, "set", "1", "pci.device_id=0x2331", "fan.speed_percent='70'"], surfaces=surfaces()) == 0
        bucket = snapshot.load(root).override_doc["devices"]["1"]
        assert bucket == {"pci": {"device_id": 0x2331}, "fan": {"speed_percent": 70}}
        for argv in (["fail-surface", "ib"], ["reset"]):
            assert execute([*ctl, *argv], surfaces=surfaces()) == 0
            assert snapshot.load(root) is not None
        assert snapshot.load(root).node() == from_files(root)


def test_the_ctl_process_changes_a_node_without_importing_pydantic(tmp_path: Path) -> None:
    root = tmp_path / "root"
    with start(root, "h100", surfaces()):
        ctl = Path(sys.executable).with_name("nvml-mock-ctl")
        done = subprocess.run([str(ctl), "--root", str(root), "temp", "0", "66"], capture_output=True, text=True,
                              env={**os.environ, "MOKKA_CTL_VERBOSE": "1"}, check=True)
        assert "node from: snapshot; pydantic loaded: False" in done.stderr, done.stderr
        status = subprocess.run([str(ctl), "--root", str(root), "status", "--json"], capture_output=True,
                                text=True, check=True)
        assert json.loads(status.stdout)["gpus"][0]["temperature_c"] == 66


# --- laying an override over a resolved node is validating the merged layers --------------------------

PATCHES = [
    {"thermal": {"temperature_gpu_c": 90}},
    {"failure": {"mode": "fallen_off_bus", "probability": None, "after_calls": None, "xid": None}},
    {"xid_events": [{"code": 79, "seq": 1}, {"code": 13, "seq": 2}]},
    {"fabric": {"health": {"route_recovery": True}}},
    {"nvlink_error": {"rate": 2.5, "links": [1]}},
    {"ecc": {"errors": {"volatile": {"double_bit": {"device_memory": 4, "total": 4}}}}},
    {"dynamic_metrics": {"temperature": {"base_c": 40, "variance_c": 3}}},
    {"clocks_throttle_reasons": {"hw_slowdown": True, "counters": {"sync_boost_us": 5}}},
    {"processes": [{"pid": 42, "name": "train", "used_memory_mib": 100}]},
]


@pytest.mark.parametrize("profile", BUILTIN_PROFILES)
@pytest.mark.parametrize("patch", PATCHES, ids=lambda p: next(iter(p)))
def test_apply_matches_validation(profile: str, patch: dict[str, Any]) -> None:
    base = resolve_base(NodeSpec(profile=profile, gpus=1).inputs())
    merged = merge_all(encode(base.gpus[0].config), patch)
    try:
        validated = DeviceConfig.model_validate(merged)
    except ValueError:
        with pytest.raises(ApplyError):
            apply_override(base, {"devices": {"0": patch}})
        return
    applied = apply_override(base, {"devices": {"0": patch}}).gpus[0].config
    assert applied == decode(GpuConfig, validated.model_dump(exclude_none=True))


def test_apply_names_what_it_cannot_place() -> None:
    base = resolve_base(NodeSpec(profile="t4", gpus=1).inputs())
    with pytest.raises(ApplyError, match=r"devices\.0\.thermal\.no_such_field: unknown key"):
        apply_override(base, {"devices": {"0": {"thermal": {"no_such_field": 1}}}})
    bare = base.replace(gpus=(base.gpus[0].replace(config=base.gpus[0].config.replace(power=None)),))
    with pytest.raises(ApplyError, match=r"devices\.0\.power: .*default_limit_mw"):
        apply_override(bare, {"all": {"power": {"current_draw_mw": 1}}})


class CountingSurface(ProbeSurface):
    """Reads only the thermal block; counts how often its plan is built."""

    name = "counting"
    reads = frozenset({"thermal"})
    built = 0

    def plan(self, node: Any, ctx: Any) -> Any:
        type(self).built += 1
        return super().plan(node, ctx)


def test_a_change_builds_only_the_plans_that_read_it(tmp_path: Path) -> None:
    root = tmp_path / "root"
    chosen: dict[str, Surface] = {"gpu": nvml_surface(), "counting": CountingSurface()}
    with start(root, "h100", chosen):
        built = CountingSurface.built
        for words, rebuilt in ((("power", "0", "90"), False), (("temp", "0", "71"), True),
                               (("fail", "1", "lost"), False), (("fail-surface", "pci"), True)):
            _, mutate = parse(root, words)
            outcome = apply(root, mutate, surfaces=chosen)
            assert CountingSurface.built == built + rebuilt, words
            assert ("counting" in outcome.render.unchanged) != rebuilt or "counting" in outcome.render.staged
            built = CountingSurface.built
        assert snapshot.load(root).node() == from_files(root)


def test_touched_fields_names_configuration_fields_only() -> None:
    from mokka_core.stage.render import touched_fields

    node = NodeSpec(profile="h100", gpus=2).resolve()
    warmer = apply_override(node, {"devices": {"1": {"thermal": {"temperature_gpu_c": 80}, "fan": {"count": 3}}}})
    assert touched_fields(node, warmer) == {"thermal", "fan"}
    assert touched_fields(node, node) == frozenset()
    assert touched_fields(node, apply_override(node, {"surfaces": {"nvlink": {"state": "failed"}}})) is None
    assert touched_fields(node, NodeSpec(profile="h100", gpus=3).resolve()) is None


CTL_IMPORTS = """
import sys
from mokka_core.ctl.cli import execute
import traceback, builtins
real = builtins.__import__
def spy(name, *a, **k):
    if name == "tempfile" and "tempfile" not in sys.modules:
        traceback.print_stack(limit=8)
    return real(name, *a, **k)
builtins.__import__ = spy
code = execute(["--root", sys.argv[1], "temp", "0", "77"])
heavy = {"pydantic", "dataclasses", "logging", "subprocess", "typer", "sysconfig", "inspect"}
print(code, sorted(heavy & {name.split(".")[0] for name in sys.modules}))
"""


def test_a_ctl_change_loads_nothing_heavy(tmp_path: Path) -> None:
    """nvml-mock-ctl's latency is mostly interpreter start and imports: a change from the snapshot, through
    every installed surface's plan, must not load pydantic, dataclasses, logging or subprocess."""
    root = tmp_path / "root"
    chosen = installed_surfaces()
    if "gpu" not in chosen:
        pytest.skip("sim-gpu is not installed here (tox -e e2e runs this with every surface)")
    with start(root, "h100", chosen):
        assert snapshot.load(root) is not None
        done = subprocess.run([sys.executable, "-c", CTL_IMPORTS, str(root)], capture_output=True, text=True,
                              timeout=60, env={**os.environ, "PYDANTIC_DISABLE_PLUGINS": "__all__"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "0 []", done.stdout + done.stderr


def test_the_snapshot_text_is_the_json_of_its_record_when_its_base_text_is_reused() -> None:
    from mokka_core.stage import snapshot as node_snapshot

    base = {"gpus": [{"name": "NVIDIA H100 80GB HBM3", "memory": {"total_mib": 81559}}], "quote": "a\"b"}
    for doc in ({}, {"devices": {"0": {"thermal": {"temperature_gpu_c": 91}}}}, {"version": 1}):
        data = {"format": 1, "override_doc": doc, "base": base, "digests": {"gpu": "ab"}}
        assert json.loads(node_snapshot._encoded(data)) == data  # the second and third reuse base's text
    other = {**base, "quote": "c"}
    data = {"format": 1, "base": other}
    assert json.loads(node_snapshot._encoded(data)) == data
    assert json.loads(node_snapshot._encoded({"format": 1, "digests": {}})) == {"format": 1, "digests": {}}
