"""nvml-mock-ctl's fast path (the node's snapshot, no pydantic) against its full path (every input validated).

For every built-in profile and every verb the fast path takes, both paths must make the same
override document and the same node, and so the same plan for every surface installed here (all
seven in the e2e environment); once applied, the snapshot the fast path advanced must be the one
a full resolve of the files on disk gives.  Where the fast path cannot be sure (no or a stale
snapshot, a verb that does not check its own values) the full path must run.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mokka_core.ctl.cli import build_parser, execute, mutation
from mokka_core.ctl.report import node_summary
from mokka_core.ctl.store import Refused, apply, prepare_fast, prepare_full
from mokka_core.ctl.verbs import FAST_VERBS
from mokka_core.model.records import NodeRecord, plain
from mokka_core.model.resolve import base_configs
from mokka_core.model.shapes import NotFast, device_shapes, lay_over
from mokka_core.model.spec import NodeSpec
from mokka_core.node.settings import NodeSettings
from mokka_core.schema.builtin import BUILTIN_PROFILES, builtin_text
from mokka_core.schema.merge import merge_all
from mokka_core.schema.profile import DeviceConfig
from mokka_core.stage import nodefile, snapshot
from mokka_core.stage.render import build_plans, context, installed_surfaces, plan_digest, resolve_with, services
from mokka_core.stage.store import OVERRIDE_FILE, NodeStore
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
    node = snapshot.load(root)
    assert node is not None, "the daemon wrote no snapshot"
    gpus = node.data["node"]["gpus"]
    filled = [w.format(uuid1=gpus[1]["uuid"], bus0=gpus[0]["bus_id"].upper()) for w in words]
    args = build_parser().parse_args(filled)
    return args, mutation(args)


def outcome_of(prepare: Any, *args: Any) -> Any:
    try:
        return prepare(*args)
    except Refused as exc:
        return f"refused: {exc}"


def digests(node: Any, chosen: dict[str, Surface], root: Path) -> dict[str, str]:
    with pytest.MonkeyPatch.context() as frozen:  # an NVLink error clock starts now: the same now for both
        frozen.setattr("mokka_core.stage.nvml_view.time.time_ns", lambda: 1_800_000_000 * 10**9)
        return {name: plan_digest(plan) for name, plan in build_plans(node, chosen, context(root)).items()}


def full_resolve(root: Path) -> Any:
    inputs = nodefile.load(root).inputs()
    return resolve_with(inputs, inputs.override)


@pytest.mark.parametrize("profile", BUILTIN_PROFILES)
def test_fast_and_full_paths_make_the_same_node(tmp_path: Path, profile: str) -> None:
    root = tmp_path / "root"
    chosen = surfaces()
    with start(root, profile, chosen):
        for words in COMMANDS:
            args, mutate = parse(root, words)
            assert args.verb in FAST_VERBS
            with NodeStore(root).lock():
                full = outcome_of(prepare_full, root, mutate)
                fast = outcome_of(prepare_fast, root, mutate)
            if isinstance(full, str):
                assert fast == full, words
                continue
            assert fast is not None, f"{words}: the fast path declined"
            assert fast.doc == full.doc, words
            assert fast.message == full.message
            assert plain(fast.node) == full.node.model_dump(mode="json"), words
            assert digests(fast.node, chosen, root) == digests(full.node, chosen, root), words

            outcome = apply(root, mutate, surfaces=chosen, fast=True)
            assert outcome.fast
            advanced = snapshot.load(root)
            assert advanced is not None, f"{words}: the advanced snapshot is stale"
            assert advanced.data["node"] == full_resolve(root).model_dump(mode="json"), words


@pytest.mark.parametrize("profile", BUILTIN_PROFILES)
@pytest.mark.parametrize("settings", [{}, {"imex": {"state": "failed"}, "ib": {"enabled": False}}],
                         ids=["healthy", "imex-failed-ib-off"])
def test_a_record_asks_for_the_same_services(tmp_path: Path, profile: str, settings: dict[str, Any]) -> None:
    """The daemon takes the services of a change nvml-mock-ctl rendered from the snapshot's record."""
    node = NodeSpec(profile=profile, gpus=2, surfaces=settings).resolve()
    record = NodeRecord(node.model_dump(mode="json"))
    chosen = surfaces()
    assert services(record, chosen, tmp_path) == services(node, chosen, tmp_path)


@pytest.mark.parametrize("profile", BUILTIN_PROFILES)
def test_status_reads_the_same_from_a_record(tmp_path: Path, profile: str) -> None:
    """``nvml-mock-ctl status`` prints the snapshot's record when it is fresh: the same summary as the models."""
    root = tmp_path / "root"
    with start(root, profile, surfaces()):
        for words in (("fail", "1", "ecc-uncorrectable"), ("throttle", "0", "thermal"), ("xid", "0", "31"),
                      ("nvlink-error", "0", "5"), ("fabric-health", "1", "route_recovery")):
            _, mutate = parse(root, words)
            with contextlib.suppress(Refused):  # no NVLink or no fabric on this profile
                apply(root, mutate, surfaces=surfaces(), fast=True)
        record = NodeRecord(snapshot.load(root).data["node"])
        assert node_summary(record, root) == node_summary(full_resolve(root), root)


def test_stale_missing_or_corrupt_snapshots_take_the_full_path(tmp_path: Path) -> None:
    root = tmp_path / "root"
    chosen = surfaces()
    with start(root, "h100", chosen):
        _, mutate = parse(root, ("temp", "0", "70"))
        assert apply(root, mutate, surfaces=chosen, fast=True).fast

        (root / OVERRIDE_FILE).write_text("version: 1\nall:\n  thermal:\n    temperature_gpu_c: 33\n")  # by hand
        assert snapshot.load(root) is None
        outcome = apply(root, mutate, surfaces=chosen, fast=True)
        assert not outcome.fast
        assert [gpu.config.thermal.temperature_gpu_c for gpu in full_resolve(root).gpus] == [70, 33]
        assert apply(root, mutate, surfaces=chosen, fast=True).fast  # the full path wrote a new snapshot

        NodeStore(root).snapshot.write_text('{"format": 1, "inputs": [')
        assert snapshot.load(root) is None
        assert not apply(root, mutate, surfaces=chosen, fast=True).fast

        data = json.loads(NodeStore(root).snapshot.read_text())  # well-formed, fresh, but nonsense
        for gpu in data["node"]["gpus"]:
            del gpu["uuid"]
        NodeStore(root).snapshot.write_text(json.dumps(data))
        assert snapshot.load(root) is not None
        assert not apply(root, mutate, surfaces=chosen, fast=True).fast

        NodeStore(root).snapshot.unlink()
        assert not apply(root, mutate, surfaces=chosen, fast=True).fast


def test_a_changed_profile_file_makes_the_snapshot_stale(tmp_path: Path) -> None:
    profile = tmp_path / "custom.yaml"
    profile.write_text(builtin_text("t4"))
    root = tmp_path / "root"
    spec = NodeSpec(profile_file=profile, gpus=2)
    with DaemonRunner(NodeSettings(root=root, spec=spec, supervise=False, watch=False), surfaces=surfaces()):
        assert snapshot.load(root) is not None
        profile.write_text(builtin_text("t4").replace("name: Tesla T4", "name: Tesla T4 (edited)"))
        assert snapshot.load(root) is None
        outcome = apply(root, mutation(build_parser().parse_args(["temp", "0", "50"])), surfaces=surfaces(),
                        fast=True)
        assert not outcome.fast and outcome.node.gpus[0].config.name.endswith("(edited)")


def test_verbs_that_do_not_check_their_values_take_the_full_path(tmp_path: Path) -> None:
    root = tmp_path / "root"
    with start(root, "h100", surfaces()):
        assert not {"set", "enable", "disable", "fail-surface", "heal", "reset"} & FAST_VERBS
        for argv in (["set", "0", "fan.speed_percent=70"], ["fail-surface", "ib"], ["reset"]):
            assert execute(["--root", str(root), *argv], surfaces=surfaces()) == 0
            assert snapshot.load(root) is not None  # and the full path keeps the snapshot current
        assert snapshot.load(root).data["node"] == full_resolve(root).model_dump(mode="json")


def test_a_surface_that_needs_the_models_makes_the_ctl_take_the_full_path(tmp_path: Path) -> None:
    class ModelsOnly(ProbeSurface):
        def plan(self, node: Any, ctx: Any) -> Any:
            node.model_dump()  # a record has no model_dump
            return super().plan(node, ctx)

    root = tmp_path / "root"
    chosen = {"probe": ModelsOnly()}
    with start(root, "h100", chosen):
        _, mutate = parse(root, ("temp", "0", "70"))
        outcome = apply(root, mutate, surfaces=chosen, fast=True)
        assert not outcome.fast
        assert outcome.node.gpus[0].config.thermal.temperature_gpu_c == 70


def test_the_ctl_process_changes_a_node_without_importing_pydantic(tmp_path: Path) -> None:
    root = tmp_path / "root"
    with start(root, "h100", surfaces()):
        ctl = Path(sys.executable).with_name("nvml-mock-ctl")
        done = subprocess.run([str(ctl), "--root", str(root), "temp", "0", "66"], capture_output=True, text=True,
                              env={**os.environ, "MOKKA_CTL_VERBOSE": "1"}, check=True)
        assert "path: fast; pydantic loaded: False" in done.stderr, done.stderr
        status = subprocess.run([str(ctl), "--root", str(root), "status", "--json"], capture_output=True,
                                text=True, check=True)
        assert json.loads(status.stdout)["gpus"][0]["temperature_c"] == 66


# --- laying an override over a validated configuration is validating the merged layers --------------

PATCHES = [
    {"thermal": {"temperature_gpu_c": 90}},
    {"failure": {"mode": "fallen_off_bus", "probability": None, "after_calls": None, "xid": None}},
    {"xid_events": [{"code": 79, "seq": 1}, {"code": 13, "seq": 2}]},
    {"fabric": {"health": {"route_recovery": True}}},
    {"nvlink_error": {"rate": 2.5, "links": [1]}},
    {"ecc": {"errors": {"volatile": {"double_bit": {"device_memory": 4, "total": 4}}}}},
]


@pytest.mark.parametrize("profile", BUILTIN_PROFILES)
@pytest.mark.parametrize("patch", PATCHES, ids=lambda p: next(iter(p)))
def test_lay_over_matches_validation(profile: str, patch: dict[str, Any]) -> None:
    spec = NodeSpec(profile=profile, gpus=1)
    base = base_configs(spec.inputs())[0]
    try:
        fast = lay_over(base, patch, device_shapes())
    except NotFast:
        with pytest.raises(ValueError):
            DeviceConfig.model_validate(merge_all(base, patch))
        return
    assert fast == DeviceConfig.model_validate(merge_all(base, patch)).model_dump(mode="json")


def test_lay_over_leaves_what_it_cannot_tell_to_validation() -> None:
    shapes = device_shapes()
    base = base_configs(NodeSpec(profile="t4", gpus=1).inputs())[0]
    with pytest.raises(NotFast, match="unknown key"):
        lay_over(base, {"thermal": {"no_such_field": 1}}, shapes)
    with pytest.raises(NotFast, match="lacks"):
        lay_over({**base, "power": None}, {"power": {"current_draw_mw": 1}}, shapes)  # default_limit_mw required
    with pytest.raises(NotFast, match="holds blocks"):
        lay_over(base, {"xid_events": [79]}, shapes)
