"""Fault clocks are node state: renderers read them, only commands read the wall clock."""

from __future__ import annotations

from pathlib import Path

from mokka_core.model.apply import apply
from mokka_core.model.faults import nvlink_error_clock, rebased_nvlink_errors
from mokka_core.model.spec import NodeSpec

BOOTED = 1_700_000_000_000
H100 = NodeSpec(profile="h100", gpus=2).resolve()


def with_errors(**block: object) -> object:
    return apply(H100, {"devices": {"0": {"nvlink_error": block}}})


def test_a_rate_without_since_grows_from_boot_on_the_chosen_active_links() -> None:
    clock = nvlink_error_clock(with_errors(rate=2.5, links=[1, 3]).gpus[0], BOOTED)
    assert (clock.rate_milli, clock.epoch_ms, clock.inject) == (2500, BOOTED, frozenset({1, 3}))
    assert clock.at(BOOTED + 10_000) == {1: 25, 3: 25}
    assert nvlink_error_clock(with_errors(rate=2.5).gpus[0], BOOTED).inject == frozenset(range(18))


def test_no_origin_no_growth_and_accrued_counts_stay() -> None:
    clock = nvlink_error_clock(with_errors(rate=2.5, accrued=[0, 7]).gpus[0], 0)
    assert clock.rate_milli == 0 and clock.at(BOOTED) == {1: 7}


def test_inactive_links_are_not_injected() -> None:
    failed = NodeSpec(profile="h100", gpus=2, surfaces={"nvlink": {"state": "failed"}}).resolve()
    gpu = apply(failed, {"devices": {"0": {"nvlink_error": {"rate": 5}}}}).gpus[0]
    assert not nvlink_error_clock(gpu, BOOTED).inject


def test_a_changed_clock_keeps_its_counts_an_unrelated_change_keeps_the_clock() -> None:
    running = with_errors(rate=2.5, links=[1], since_ms=BOOTED)
    now = BOOTED + 60_000
    assert rebased_nvlink_errors(running, apply(running, {"devices": {"1": {"thermal": {"temperature_gpu_c": 50}}}}),
                                 now, BOOTED) == {}
    healed = apply(H100, {"devices": {"0": {"nvlink_error": {"rate": 0, "links": [1], "since_ms": BOOTED}}}})
    assert rebased_nvlink_errors(running, healed, now, BOOTED) == {
        0: {"nvlink_error.since_ms": now, "nvlink_error.accrued": [0, 150]}}
    # a link going down (the nvlink surface failed) stops its growth, keeping what it counted
    failed = NodeSpec(profile="h100", gpus=2, surfaces={"nvlink": {"state": "failed"}}).resolve()
    down = apply(failed, {"devices": {"0": {"nvlink_error": {"rate": 2.5, "links": [1], "since_ms": BOOTED}}}})
    assert rebased_nvlink_errors(running, down, now, BOOTED)[0]["nvlink_error.accrued"] == [0, 150]
    # the block back to the profile's (reset): the counts go with it
    assert rebased_nvlink_errors(running, H100, now, BOOTED, base=H100) == {}


def test_ctl_changes_carry_the_counts(tmp_path: Path) -> None:
    """Through nvml-mock-ctl: the verb restarts the clock where it changes, and only there."""
    from mokka_core.ctl import store, verbs
    from mokka_core.stage import nodefile
    from mokka_core.testing.runner import NvmlSurface

    root = tmp_path / "node"
    root.mkdir()
    nodefile.save(root, NodeSpec(profile="h100", gpus=2), booted_ms=BOOTED)
    surfaces = {"gpu": NvmlSurface()}

    def error_block() -> dict:
        doc = store.read_document(store.override_path(root))
        return doc["devices"]["0"]["nvlink_error"]

    store.apply(root, verbs.nvlink_error("0", 2.5, [1]), surfaces=surfaces)
    first = error_block()
    assert first["rate"] == 2.5 and first["since_ms"] > BOOTED and not first.get("accrued")
    store.apply(root, verbs.set_values("1", ["thermal.temperature_gpu_c=50"]), surfaces=surfaces, validate=True)
    assert error_block() == first
    store.apply(root, verbs.nvlink_error("0", 0, [1]), surfaces=surfaces)
    healed = error_block()
    assert healed["rate"] == 0 and healed["since_ms"] >= first["since_ms"] and len(healed["accrued"]) in (0, 2)
    store.apply(root, verbs.reset("0"), surfaces=surfaces)
    assert "0" not in store.read_document(store.override_path(root))["devices"]  # reset: no clock, no counts
