"""The fabric state the fabricmanager surface contributes to the NVML state file."""

from __future__ import annotations

from pathlib import Path

import pytest

from mokka_core.model.apply import apply
from mokka_core.model.spec import NodeSpec
from mokka_core.stage.nvml_view import render_nvml_state
from mokka_core.stage.paths import LIB_DIR
from mokka_core.stage.store import NodeStore
from mokka_core.stage.surface import StageContext
from mokka_sim_fabricmanager.surface import FabricmanagerSurface


def fabric(tmp_path: Path, *, profile: str = "gb200", **surface: object) -> tuple[str | None, str | None, str | None]:
    node = NodeSpec(profile=profile, gpus=4, surfaces={"fabricmanager": surface} if surface else {}).resolve()
    contributed = FabricmanagerSurface().nvml(node, StageContext(root=tmp_path))
    text = render_nvml_state(node, (contributed,))
    kv = dict(line.split("=", 1) for line in text.splitlines()[1:-1] if not line.startswith("#"))
    return kv.get("device.0.fabric.state"), kv.get("device.0.fabric.auto"), kv.get("system.fabric_ready_file")


def test_auto_follows_the_daemon_failed_is_stuck_disabled_never_starts(tmp_path: Path) -> None:
    # in progress until the daemon's marker exists; named from the state file's directory, so that a container given
    # the root elsewhere finds the node's marker
    marker = (tmp_path / LIB_DIR / fabric(tmp_path)[2]).resolve()  # type: ignore[operator]
    assert marker == NodeStore(tmp_path.absolute()).fabricmanager_ready.resolve()
    assert fabric(tmp_path)[:2] == ("2", "1") and not fabric(tmp_path)[2].startswith("/")  # type: ignore[union-attr]
    assert fabric(tmp_path, state="failed") == ("2", None, None)  # daemon up, the fabric never trains
    assert fabric(tmp_path, enabled=False) == ("1", None, None)  # no fabric manager: probe not started
    assert fabric(tmp_path, profile="a100") == (None, None, None)  # no fabric on the board


@pytest.mark.parametrize(("state", "shown"), [("completed", "3"), ("not_started", "1"), ("in_progress", "2")])
def test_a_state_the_profile_gives_is_shown_as_given(tmp_path: Path, state: str, shown: str) -> None:
    node = apply(NodeSpec(profile="gb200", gpus=4).resolve(), {"all": {"fabric": {"state": state}}})
    contributed = FabricmanagerSurface().nvml(node, StageContext(root=tmp_path))
    assert contributed.devices[0] == (("fabric.state", int(shown)),) and not contributed.system
