"""The NVLink model of each profile, from the node state (no library needed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from mokka_core.model.spec import NodeSpec
from mokka_sim_nvlink.cli import app
from mokka_sim_nvlink.topology import fabric_placement, link_rows, nv_matrix

OVERLAY = """version: 1
domains:
- name: rack-a
  uuid: 6f1d2c3b-4a59-4e6f-8a7b-9c0d1e2f3a4b
  cliques:
  - id: 32766
    nodes: [gb200-a, gb200-b]
  - id: 5
    nodes: [gb200-c]
"""


def node(profile: str, state: str = "healthy", enabled: bool = True, **kw):
    return NodeSpec(profile=profile, surfaces={"nvlink": {"enabled": enabled, "state": state}}, **kw).resolve()


@pytest.mark.parametrize(("profile", "count", "links", "mbps"), [
    ("a100", 8, 12, 25781), ("h100", 8, 18, 26562), ("b200", 8, 18, 53125), ("gb200", 4, 18, 53125),
    ("gb300", 4, 18, 53125),
])
def test_nv_matrix_of_switched_profiles(profile: str, count: int, links: int, mbps: int) -> None:
    state = node(profile)
    matrix = nv_matrix(state)
    assert matrix == [[0 if i == j else links for j in range(count)] for i in range(count)]
    rows = link_rows(state)
    assert len(rows) == count * links
    assert all(row.active and row.speed_mbps == mbps and row.remote.startswith("NVSwitch") for row in rows)


@pytest.mark.parametrize("profile", ["l40s", "t4"])
def test_profiles_without_nvlink_have_no_links(profile: str) -> None:
    assert not link_rows(node(profile)) and not any(any(row) for row in nv_matrix(node(profile)))


def test_failed_links_are_inactive_and_disabled_links_absent() -> None:
    failed = node("h100", state="failed")
    assert link_rows(failed) and not any(row.active for row in link_rows(failed))
    assert not any(any(row) for row in nv_matrix(failed))
    assert link_rows(node("h100", enabled=False)) == []


def test_cluster_uuid_and_clique_from_overlay_by_node_name(tmp_path: Path) -> None:
    overlay = tmp_path / "topology.yaml"
    overlay.write_text(OVERLAY)
    placements = {name: fabric_placement(node("gb200", node_name=name, overlay_file=overlay))
                  for name in ("gb200-a", "gb200-b", "gb200-c", "elsewhere")}
    assert placements["gb200-a"] == placements["gb200-b"] == ("6f1d2c3b-4a59-4e6f-8a7b-9c0d1e2f3a4b", 32766)
    assert placements["gb200-c"] == ("6f1d2c3b-4a59-4e6f-8a7b-9c0d1e2f3a4b", 5)
    assert placements["elsewhere"] == ("00000000-0000-0000-0000-000000000001", 0)
    # GPUs without a fabric (a100) never start reporting one because of the overlay
    assert fabric_placement(node("a100", node_name="gb200-a", overlay_file=overlay)) is None


def test_links_command_prints_the_model(tmp_path: Path) -> None:
    overlay = tmp_path / "topology.yaml"
    overlay.write_text(OVERLAY)
    result = CliRunner().invoke(app, ["links", "-p", "gb200", "--node-name", "gb200-c", "--overlay-file", str(overlay)])
    assert result.exit_code == 0, result.output
    assert "GPU0\t X \tNV18\tNV18\tNV18" in result.output
    assert "GPU 3 Link 17: 53.125 GB/s -> NVSwitch" in result.output
    assert result.output.endswith("Fabric: ClusterUUID 6f1d2c3b-4a59-4e6f-8a7b-9c0d1e2f3a4b, CliqueId 5\n")
    failed = CliRunner().invoke(app, ["links", "-p", "a100", "--failed"])
    assert "GPU 0 Link 0: <inactive>" in failed.output and "NV12" not in failed.output
