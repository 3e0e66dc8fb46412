"""The NVLink model as real nvidia-smi shows it through the mock library."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mokka_core.model.spec import NodeSpec
from mokka_core.stage.surface import StageContext
from mokka_sim_nvlink.surface import NvlinkSurface

pytestmark = pytest.mark.consumer

OVERLAY = """version: 1
domains:
- uuid: 6f1d2c3b-4a59-4e6f-8a7b-9c0d1e2f3a4b
  cliques:
  - id: 32766
    nodes: [gb200-a, gb200-b]
"""


def node(profile: str, state: str = "healthy", **kw):
    return NodeSpec(profile=profile, surfaces={"nvlink": {"state": state}}, **kw).resolve()


def ok(result) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def topo_matrix(text: str) -> list[list[str]]:
    rows = []
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.split("\t")]
        if re.fullmatch(r"GPU\d+", cells[0]):
            rows.append(cells[1:])
    return rows


@pytest.mark.parametrize(("profile", "count", "nv"), [("a100", 8, "NV12"), ("h100", 8, "NV18"), ("b200", 8, "NV18"),
                                                      ("gb200", 4, "NV18")])
def test_topo_matrix(nvml_view, smi, profile: str, count: int, nv: str) -> None:
    state = node(profile)
    root = nvml_view(state)
    matrix = topo_matrix(ok(smi(root)("topo", "-m")))
    assert [row[:count] for row in matrix] == [["X" if i == j else nv for j in range(count)] for i in range(count)]
    assert NvlinkSurface().check(state, StageContext(root=root)) == []


@pytest.mark.parametrize(("profile", "links", "speed"), [("a100", 12, "25.781 GB/s"), ("h100", 18, "26.562 GB/s"),
                                                         ("gb200", 18, "53.125 GB/s")])
def test_nvlink_status_and_error_counters(nvml_view, smi, profile: str, links: int, speed: str) -> None:
    run = smi(nvml_view(node(profile)))
    status = ok(run("nvlink", "-s", "-i", "0"))
    assert re.findall(r"Link (\d+): (.*)", status) == [(str(k), speed) for k in range(links)]
    errors = ok(run("nvlink", "-e", "-i", "0"))
    for k in range(links):
        for counter in ("Replay Errors", "Recovery Errors", "CRC Errors"):
            assert f"Link {k}: {counter}: 0" in errors


def test_failed_links_are_inactive(nvml_view, smi) -> None:
    state = node("h100", state="failed")
    root = nvml_view(state)
    run = smi(root)
    status = ok(run("nvlink", "-s", "-i", "0"))
    assert "Unable to retrieve NVLink information as all links are inActive" in status  # real 550 wording
    matrix = topo_matrix(ok(run("topo", "-m")))
    assert not any(cell.startswith("NV") for row in matrix for cell in row)
    assert NvlinkSurface().check(state, StageContext(root=root)) == []
    problems = NvlinkSurface().check(node("h100"), StageContext(root=root))
    assert any("link 0: NVML view says inactive, node says active" in p for p in problems)


def test_gb200_fabric_from_overlay(tmp_path: Path, nvml_view, smi) -> None:
    overlay = tmp_path / "topology.yaml"
    overlay.write_text(OVERLAY)
    for name in ("gb200-a", "gb200-b"):
        state = node("gb200", node_name=name, overlay_file=overlay)
        root = nvml_view(state, name=name)
        run = smi(root)
        query = ok(run("-q"))
        assert query.count("    Fabric\n        State                             : ") == 4
        if run.version == "535":
            continue  # 535's -q prints only the fabric State and Status
        assert query.count("ClusterUUID                       : 6f1d2c3b-4a59-4e6f-8a7b-9c0d1e2f3a4b") == 4
        assert query.count("CliqueId                          : 32766") == 4
        assert NvlinkSurface().check(state, StageContext(root=root)) == []
