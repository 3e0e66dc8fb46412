"""What the nvlink surface contributes to the NVML state file."""

from __future__ import annotations

from pathlib import Path

import pytest

from mokka_core.model.apply import apply
from mokka_core.model.spec import NodeSpec
from mokka_core.stage.nvml_view import render_nvml_state
from mokka_core.stage.surface import StageContext
from mokka_sim_nvlink.surface import NvlinkSurface

GOLDEN = Path(__file__).parent / "golden"
BOOTED = 1_700_000_000_000


def keys(node: object, booted_ms: int = BOOTED) -> dict[str, str]:
    contributed = NvlinkSurface().nvml(node, StageContext(root=Path("/"), booted_ms=booted_ms))
    text = render_nvml_state(node, (contributed,))
    return dict(line.split("=", 1) for line in text.splitlines()[1:-1] if not line.startswith("#"))


@pytest.mark.parametrize(("profile", "gpus"), [("h100", None), ("gb200", 4)])
def test_links_and_matrix_as_the_golden_file(profile: str, gpus: int | None) -> None:
    """The keys as the NVML view carried them before this surface owned them (links, NV# rows)."""
    shown = keys(NodeSpec(profile=profile, node_name="golden-node", gpus=gpus).resolve())
    golden = (GOLDEN / f"{profile}.keys").read_text().splitlines()
    assert [f"{k}={v}" for k, v in shown.items() if ".nvlink" in k or "topology.nvlinks" in k] == golden


def test_no_links_where_the_surface_is_disabled_or_failed() -> None:
    off = keys(NodeSpec(profile="h100", surfaces={"nvlink": {"enabled": False}}).resolve())
    assert not any(".nvlink." in k for k in off) and off["device.0.topology.nvlinks"] == ",".join("0" * 8)
    failed = keys(NodeSpec(profile="h100", surfaces={"nvlink": {"state": "failed"}}).resolve())
    assert failed["device.0.nvlink.count"] == "18" and failed["device.0.nvlink.0.state"] == "0"


def test_error_clocks_from_the_node_state() -> None:
    node = NodeSpec(profile="h100").resolve()
    profile_rate = keys(apply(node, {"all": {"nvlink_error": {"rate": 2.5, "links": [1]}}}))
    assert profile_rate["device.3.nvlink_error.rate_milli"] == "2500"
    assert profile_rate["device.3.nvlink_error.epoch_ms"] == str(BOOTED)  # from when the node came up
    assert profile_rate["device.3.nvlink.1.errors.inject"] == "1"
    assert "device.3.nvlink.0.errors.inject" not in profile_rate
    healed = {"rate": 0, "since_ms": BOOTED + 5, "accrued": [0, 9]}
    ctl = keys(apply(node, {"devices": {"0": {"nvlink_error": healed}}}))
    assert ctl["device.0.nvlink_error.rate_milli"] == "0" and ctl["device.0.nvlink.1.errors.injected"] == "9"
    assert "device.0.nvlink.1.errors.inject" not in ctl and "device.1.nvlink_error.rate_milli" not in ctl
    # rendered twice, the same text: nothing read from a clock or from what is staged
    doc = {"all": {"nvlink_error": {"rate": 1}}}
    assert keys(apply(node, doc)) == keys(apply(node, doc))
