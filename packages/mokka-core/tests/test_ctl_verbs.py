"""nvml-mock-ctl: every verb changes the node as a test writer expects; bad input changes nothing."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from mokka_core.ctl.cli import EXAMPLES, build_parser, execute
from mokka_core.model.codec import encode
from mokka_core.model.node import Node
from mokka_core.model.resolve import resolve
from mokka_core.model.spec import NodeSpec
from mokka_core.stage import nodefile
from mokka_core.stage.store import OVERRIDE_FILE, NodeStore
from mokka_core.testing.runner import PROBE_FILE, ProbeSurface


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    nodefile.save(root, NodeSpec(profile="h100", gpus=4))
    return root


def ctl(root: Path, *argv: str) -> int:
    return execute(["--root", str(root), *argv], surfaces={"probe": ProbeSurface()})


def node(root: Path) -> Node:
    inputs = nodefile.load(root).inputs()
    return resolve(inputs)


def probe(root: Path) -> dict:
    return json.loads((root / PROBE_FILE).read_text())


def override(root: Path) -> dict:
    return yaml.safe_load((root / OVERRIDE_FILE).read_text()) or {}


def test_temp_is_validated_written_and_rendered(root: Path) -> None:
    assert ctl(root, "temp", "2", "85") == 0
    assert override(root)["devices"]["2"]["thermal"]["temperature_gpu_c"] == 85
    assert probe(root)["gpus"]["2"]["temperature_c"] == 85
    assert (root / OVERRIDE_FILE).stat().st_mode & 0o777 == 0o644


def test_targets_by_index_uuid_and_bus_id(root: Path) -> None:
    gpu = node(root).gpus[3]
    assert ctl(root, "temp", gpu.uuid, "60") == 0
    assert ctl(root, "power", gpu.bus_id.upper(), "300") == 0
    state = node(root).gpus[3].config
    assert state.thermal.temperature_gpu_c == 60 and state.power.current_draw_mw == 300_000


def test_all_wins_over_earlier_per_gpu_values(root: Path) -> None:
    assert ctl(root, "temp", "1", "90") == 0
    assert ctl(root, "temp", "all", "70") == 0
    assert {g.config.thermal.temperature_gpu_c for g in node(root).gpus} == {70}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["temp", "9", "50"], "no GPU '9'"),
        (["temp", "0", "9999"], "temperature 9999 C out of range 0-200"),
        (["power", "0", "-5"], "power -5 W out of range"),
        (["power", "0", "5000"], "GPU 0 power 5000 W out of range 0-700"),
        (["util", "0", "101"], "utilization 101 % out of range"),
        (["fail", "0", "melted"], "unknown failure mode 'melted'"),
        (["throttle", "0", "sleepy"], "unknown throttle reason 'sleepy'"),
        (["pstate", "0", "16"], "performance state 16 out of range"),
        (["xid", "0", "0"], "Xid 0 out of range"),
        (["nvlink-error", "0", "5", "--links", "99"], "no NVLink link 99"),
        (["disable", "gpus"], "unknown surface 'gpus'"),
        (["set", "0", "thermal.temperature_gpu_c=-3"], "greater than or equal to 0, got -3"),
        (["set", "0", "nonsense.key=1"], "nonsense"),
    ],
)
def test_bad_input_is_refused_with_exit_1_and_override_unchanged(root: Path, argv, message, capsys) -> None:
    assert ctl(root, "temp", "1", "66") == 0
    before = (root / OVERRIDE_FILE).read_bytes()
    capsys.readouterr()
    assert ctl(root, *argv) == 1
    assert message in capsys.readouterr().err
    assert (root / OVERRIDE_FILE).read_bytes() == before


def test_usage_errors_exit_2(root: Path) -> None:
    assert ctl(root, "temp", "0") == 2
    assert ctl(root, "temp", "0", "hot") == 2
    assert ctl(root, "frobnicate") == 2


@pytest.mark.parametrize("verb", [["temp", "0", "50"], ["reset"], ["status"], ["mig", "0", "create", "1g.10gb"]])
def test_a_root_without_a_node_is_refused_before_anything_is_written(tmp_path: Path, verb: list[str], capsys) -> None:
    """A mistyped --root got the lock file and the surfaces' cache written under it before the refusal."""
    typo = tmp_path / "no-node-here"
    assert ctl(typo, *verb) == 1
    assert "no simulated node under" in capsys.readouterr().err
    assert not typo.exists()


def test_the_temp_file_of_a_killed_ctl_is_removed_by_the_next_change(root: Path) -> None:
    """A SIGKILLed in-process ctl left its temp file beside the override until teardown."""
    assert ctl(root, "temp", "0", "50") == 0
    killed = root / OVERRIDE_FILE
    left = killed.parent / f".{killed.name}.0123456789ab.tmp"
    left.write_text("devices: {")
    snapshot = NodeStore(root).snapshot
    snapshot_left = snapshot.parent / f".{snapshot.name}.ba9876543210.tmp"
    snapshot_left.write_text("{")
    other = killed.parent / ".node.json.0123456789ab.tmp"  # another file's: not the override writer's to remove
    other.write_text("{")
    assert ctl(root, "temp", "0", "51") == 0
    assert not left.exists() and not snapshot_left.exists() and other.exists()


def test_every_verb_has_help_with_an_example(capsys) -> None:
    parser = build_parser()
    verbs = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert set(verbs) == set(EXAMPLES)
    for name, sub in verbs.items():
        assert "nvml-mock-ctl" in sub.format_help() and "example" in sub.format_help(), name


def test_fallen_off_bus_is_lost_with_xid_79(root: Path) -> None:
    assert ctl(root, "fail", "3", "fallen-off-bus") == 0
    gpus = node(root).gpus
    assert gpus[3].lost and gpus[3].failure_mode == "fallen_off_bus"
    assert [(e.code, e.seq) for e in gpus[3].config.xid_events] == [(79, 1)]
    assert not any(g.lost for g in gpus[:3])
    assert probe(root)["gpus"]["3"]["lost"] is True
    assert ctl(root, "fail", "3", "healthy") == 0
    assert not node(root).gpus[3].lost
    assert node(root).gpus[3].config.xid_events[0].code == 79  # history stays


def test_the_xid_history_is_a_ring_buffer_counting_what_it_dropped(root: Path, capsys) -> None:
    """Every Xid stayed in the override, the snapshot and the kernel log: 2000 of them made a change 4x slower."""
    history = [{"code": 13, "seq": n + 1, "usec": n} for n in range(255)]
    (root / OVERRIDE_FILE).write_text(yaml.safe_dump({"devices": {"0": {"xid_events": history}}}))
    assert ctl(root, "xid", "0", "31") == 0 and ctl(root, "xid", "0", "43") == 0 and ctl(root, "xid", "0", "45") == 0
    gpu = node(root).gpus[0].config
    assert len(gpu.xid_events) == 256 and gpu.xid_events_dropped == 2
    assert [e.seq for e in gpu.xid_events[:1]] == [3] and [e.code for e in gpu.xid_events[-3:]] == [31, 43, 45]
    capsys.readouterr()
    assert ctl(root, "status") == 0
    assert "2 dropped, 13,13" in capsys.readouterr().out


def test_ecc_uncorrectable_raises_counters_rows_and_xid_48(root: Path) -> None:
    assert ctl(root, "xid", "0", "13") == 0
    assert ctl(root, "fail", "1", "ecc-uncorrectable") == 0
    assert ctl(root, "fail", "1", "ecc-uncorrectable") == 0
    gpu = node(root).gpus[1].config
    assert gpu.ecc.errors.volatile.double_bit.total == 2 and gpu.ecc.errors.aggregate.double_bit.device_memory == 2
    assert gpu.remapped_rows.uncorrectable == 2 and gpu.remapped_rows.pending
    assert [(e.code, e.seq) for e in gpu.xid_events] == [(48, 2), (48, 3)]  # seq is node-wide


def test_an_nvlink_error_rate_raises_xid_74_and_healing_raises_none(root: Path) -> None:
    assert ctl(root, "nvlink-error", "2", "5", "--links", "1") == 0
    assert ctl(root, "nvlink-error", "2", "0") == 0
    assert [(e.code, e.seq) for e in node(root).gpus[2].config.xid_events] == [(74, 1)]


def test_metric_verbs(root: Path) -> None:
    for argv in (["util", "0", "90", "--memory", "40"], ["clocks", "0", "1410", "--memory", "2619"],
                 ["throttle", "0", "thermal", "power"], ["pstate", "0", "P2"],
                 ["ecc", "0", "--correctable", "12", "--uncorrectable", "1", "--volatile"],
                 ["remapped-rows", "0", "--correctable", "3", "--pending", "--failure"],
                 ["fabric-health", "0", "degraded_bw", "route_recovery"],
                 ["nvlink-error", "0", "250", "--links", "0,1"],
                 ["set", "0", "fan.speed_percent=70"]):
        assert ctl(root, *argv) == 0, argv
    c = node(root).gpus[0].config
    assert (c.utilization.gpu, c.utilization.memory) == (90, 40)
    assert (c.clocks.graphics_current, c.clocks.sm_current, c.clocks.memory_current) == (1410, 1410, 2619)
    reasons = c.clocks_throttle_reasons
    assert reasons.hw_thermal_slowdown and reasons.sw_power_cap and not reasons.gpu_idle
    assert c.performance_state == "P2"
    assert (c.ecc.errors.volatile.single_bit.total, c.ecc.errors.volatile.double_bit.total) == (12, 1)
    assert c.ecc.errors.aggregate.single_bit.total == 0
    assert (c.remapped_rows.correctable, c.remapped_rows.pending, c.remapped_rows.failure_occurred) == (3, True, True)
    assert c.fabric.health.degraded_bandwidth and c.fabric.health.route_recovery and c.fabric.health_summary == "auto"
    assert c.nvlink_error.rate == 250 and c.nvlink_error.links == (0, 1)
    assert c.fan.speed_percent == 70
    assert ctl(root, "throttle", "0", "none") == 0
    assert not any((v for k, v in encode(node(root).gpus[0].config.clocks_throttle_reasons).items() if k != "counters"))


def test_surface_verbs_write_the_surfaces_block(root: Path) -> None:
    assert ctl(root, "disable", "ib") == 0
    assert ctl(root, "fail-surface", "fabricmanager") == 0
    surfaces = node(root).surfaces
    assert not surfaces["ib"].enabled and surfaces["fabricmanager"].state == "failed"
    assert ctl(root, "heal", "fabricmanager") == 0
    assert ctl(root, "enable", "ib") == 0
    surfaces = node(root).surfaces
    assert surfaces["ib"].enabled and surfaces["fabricmanager"].state == "healthy"


def test_reset_one_gpu_all_gpus_and_everything(root: Path) -> None:
    assert ctl(root, "temp", "0", "80") == 0
    assert ctl(root, "temp", "1", "81") == 0
    assert ctl(root, "disable", "ib") == 0
    assert ctl(root, "reset", "0") == 0
    assert set(override(root)["devices"]) == {"1"}
    assert ctl(root, "reset", "all") == 0
    assert set(override(root)) == {"version", "surfaces"}
    assert ctl(root, "reset") == 0
    assert override(root) == {}


def test_corrupt_override_is_refused_with_how_to_reset(root: Path, capsys) -> None:
    path = root / OVERRIDE_FILE
    path.write_text("devices: [unclosed\n")
    assert ctl(root, "temp", "0", "50") == 1
    err = capsys.readouterr().err
    assert "is corrupt" in err and "nvml-mock-ctl reset" in err
    assert path.read_text() == "devices: [unclosed\n"
    path.write_text("devices: {'0': {bogus: 1}}\n")
    assert ctl(root, "temp", "0", "50") == 1
    assert "devices.0.bogus" in capsys.readouterr().err
    assert ctl(root, "reset") == 0
    assert ctl(root, "temp", "0", "50") == 0


def test_status_table_and_json(root: Path, capsys) -> None:
    assert ctl(root, "fail", "2", "fallen-off-bus") == 0
    assert ctl(root, "temp", "1", "77") == 0
    capsys.readouterr()
    assert ctl(root, "status") == 0
    table = capsys.readouterr().out
    assert "fallen_off_bus" in table and "77C" in table
    assert ctl(root, "status", "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert data["gpus"][2]["health"] == "fallen_off_bus"
    (event,) = data["gpus"][2]["xid_events"]
    assert (event["code"], event["seq"]) == (79, 1)
    assert 0 < event["usec"] <= time.monotonic_ns() // 1000  # stamped when raised, for the kernel log
    assert data["gpus"][1]["temperature_c"] == 77
    assert data["surfaces"]["gpu"]["enabled"] is True


def test_no_node_is_refused(tmp_path: Path, capsys) -> None:
    assert execute(["--root", str(tmp_path), "temp", "0", "50"]) == 1
    assert "no simulated node" in capsys.readouterr().err


class PickySurface(ProbeSurface):
    """Refuses to render a GPU hotter than 100 C (stands for any surface that cannot render a change)."""

    def plan(self, node, ctx):
        if any(gpu.config.thermal.temperature_gpu_c > 100 for gpu in node.gpus):
            raise RuntimeError("cannot render above 100 C")
        return super().plan(node, ctx)


def test_a_change_a_surface_cannot_render_is_refused_and_nothing_changes(root: Path, capsys) -> None:
    surfaces = {"probe": PickySurface()}
    assert execute(["--root", str(root), "temp", "0", "90"], surfaces=surfaces) == 0
    before = (root / OVERRIDE_FILE).read_bytes(), (root / PROBE_FILE).read_bytes()
    assert execute(["--root", str(root), "temp", "0", "150"], surfaces=surfaces) == 1
    assert "surface probe: plan failed: RuntimeError: cannot render above 100 C" in capsys.readouterr().err
    assert ((root / OVERRIDE_FILE).read_bytes(), (root / PROBE_FILE).read_bytes()) == before
