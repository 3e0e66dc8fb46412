"""Node state: count scaling, deterministic identity, overlays and the override merge order."""

from pathlib import Path

import pytest

from mokka_core.errors import ConfigError
from mokka_core.model.config import RemappedRows
from mokka_core.model.spec import NodeSpec, surface_settings
from mokka_core.schema.builtin import BUILTIN_PROFILES


@pytest.mark.parametrize("name", BUILTIN_PROFILES)
def test_every_profile_resolves_with_unique_identities(name: str) -> None:
    node = NodeSpec(profile=name).resolve()
    assert len({g.uuid for g in node.gpus}) == len(node.gpus)
    assert len({g.serial for g in node.gpus}) == len(node.gpus)
    functions = [g.bus_id for g in node.gpus] + [h.bus_id for h in node.hcas]
    functions += [s.bus_id for s in node.switches if s.pci_visible]
    assert len(set(functions)) == len(functions)
    assert [g.minor_number for g in node.gpus] == list(range(len(node.gpus)))


def test_identity_is_deterministic_and_per_node() -> None:
    a = NodeSpec(profile="h100", node_name="n1").resolve()
    b = NodeSpec(profile="h100", node_name="n1").resolve()
    c = NodeSpec(profile="h100", node_name="n2").resolve()
    assert [g.uuid for g in a.gpus] == [g.uuid for g in b.gpus]
    assert a.gpus[0].uuid != c.gpus[0].uuid
    assert a.hcas[0].node_guid != c.hcas[0].node_guid


def test_scaling_past_eight_spreads_over_numa_nodes() -> None:
    node = NodeSpec(profile="gb200", gpus=72).resolve()
    assert len(node.gpus) == 72
    assert node.gpus[:4] == NodeSpec(profile="gb200", gpus=4).resolve().gpus
    assert {g.numa_node for g in node.gpus} == {0, 1}
    assert len({g.bus_id for g in node.gpus}) == 72
    assert [g.module_id for g in node.gpus][:3] == [1, 2, 3]


def test_scaling_down_keeps_the_first_gpus() -> None:
    node = NodeSpec(profile="h100", gpus=2).resolve()
    assert [g.bus_id for g in node.gpus] == ["0000:1b:00.0", "0000:43:00.0"]
    assert len(node.hcas) == 2


def test_count_zero_is_refused() -> None:
    with pytest.raises(ConfigError, match="count: must be at least 1, got 0"):
        NodeSpec(profile="h100", gpus=0).resolve()


def test_numa_and_links_follow_topology() -> None:
    node = NodeSpec(profile="h100", host_cpus="0-223").resolve()  # a host with the DGX's own CPUs
    assert [g.numa_node for g in node.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert node.gpus[4].cpu_affinity == "56-111,168-223"
    assert len(node.gpus[0].links) == 18 and all(link.remote_type == "switch" for link in node.gpus[0].links)
    assert node.hcas[4].numa_node == 1


def test_nvlink_failed_means_inactive_and_disabled_means_absent() -> None:
    failed = NodeSpec(profile="h100", surfaces=surface_settings([], ["nvlink"])).resolve()
    assert failed.gpus[0].links and not any(link.active for link in failed.gpus[0].links)
    disabled = NodeSpec(profile="h100", surfaces=surface_settings(["nvlink"], [])).resolve()
    assert disabled.gpus[0].links == ()


def test_unknown_surface_is_refused() -> None:
    with pytest.raises(ConfigError, match="unknown surface 'gpus'"):
        surface_settings(["gpus"], [])


def test_merge_order(tmp_path: Path) -> None:
    overlay = tmp_path / "topology.yaml"
    overlay.write_text(
        "version: 1\ndomains:\n- uuid: 11111111-2222-3333-4444-555555555555\n"
        "  cliques:\n  - {id: 7, nodes: [rack1-n3]}\n"
    )
    override = tmp_path / "overrides.yaml"
    override.write_text(
        "version: 1\n"
        "surfaces: {pci: {state: failed}}\n"
        "all: {thermal: {temperature_gpu_c: 60}, fabric: {clique_id: 9}}\n"
        "devices:\n  '2': {thermal: {temperature_gpu_c: 80}, failure: {mode: fallen_off_bus}}\n"
    )
    node = NodeSpec(profile="gb200", node_name="rack1-n3", overlay_file=overlay, override_file=override).resolve()
    assert node.gpus[0].config.fabric.cluster_uuid == "11111111-2222-3333-4444-555555555555"
    assert node.gpus[0].config.fabric.clique_id == 9  # override all beats the overlay
    assert node.gpus[0].config.thermal.temperature_gpu_c == 60
    assert node.gpus[0].config.thermal.shutdown_threshold_c == 95  # maps merge, siblings kept
    assert node.gpus[2].config.thermal.temperature_gpu_c == 80  # device beats all
    assert node.gpus[2].lost and not node.gpus[1].lost
    assert node.surface("pci").state == "failed"


def test_overlay_only_applies_to_fabric_gpus(tmp_path: Path) -> None:
    overlay = tmp_path / "topology.yaml"
    overlay.write_text("domains:\n- uuid: 11111111-2222-3333-4444-555555555555\n  cliques: [{id: 1, nodes: [n]}]\n")
    node = NodeSpec(profile="a100", node_name="n", overlay_file=overlay).resolve()
    assert node.gpus[0].config.fabric is None


def test_null_in_override_clears_a_block(tmp_path: Path) -> None:
    """null replaces: a block every GPU has goes back to its defaults, a block a board may lack goes away."""
    override = tmp_path / "overrides.yaml"
    override.write_text("all: {remapped_rows: null, fabric: null}\n")
    node = NodeSpec(profile="h100", override_file=override).resolve()
    assert node.gpus[0].config.remapped_rows == RemappedRows()
    assert node.gpus[0].config.fabric is None


def test_bad_override_value_names_the_override_file(tmp_path: Path) -> None:
    override = tmp_path / "overrides.yaml"
    override.write_text("devices: {'1': {thermal: {temperature_gpu_c: 9999}}}\n")
    with pytest.raises(ConfigError, match=r"overrides.yaml: devices.1.thermal.temperature_gpu_c: .*9999"):
        NodeSpec(profile="h100", override_file=override).resolve()


def test_base_profile_is_never_mutated(tmp_path: Path) -> None:
    override = tmp_path / "overrides.yaml"
    override.write_text("all: {thermal: {temperature_gpu_c: 99}}\n")
    NodeSpec(profile="h100", override_file=override).resolve()
    assert NodeSpec(profile="h100").resolve().gpus[0].config.thermal.temperature_gpu_c == 34


def test_gpu_lookup_by_any_id() -> None:
    node = NodeSpec(profile="h100").resolve()
    gpu = node.gpus[3]
    assert node.gpu("3") is gpu
    assert node.gpu(gpu.uuid.upper()) is gpu
    assert node.gpu("00000000:61:00.0") is gpu
    assert node.gpu("61:00.0") is gpu
    with pytest.raises(LookupError):
        node.gpu("9")


def test_node_state_is_immutable() -> None:
    node = NodeSpec(profile="t4").resolve()
    with pytest.raises(AttributeError, match="immutable"):
        node.node_name = "other"  # type: ignore[misc]


def test_override_blocks_may_be_partial(tmp_path: Path) -> None:
    override = tmp_path / "overrides.yaml"
    override.write_text("all: {power: {current_draw_mw: 95000}, memory: {used_bytes: 1024}}\n")
    node = NodeSpec(profile="h100", override_file=override).resolve()
    assert node.gpus[0].config.power.current_draw_mw == 95000
    assert node.gpus[0].config.power.default_limit_mw == 700000
    assert node.gpus[0].config.memory.total_bytes == 85520809984


def test_bad_value_from_override_all_is_named_there(tmp_path: Path) -> None:
    override = tmp_path / "overrides.yaml"
    override.write_text("all: {power: {current_draw_mw: -5}}\n")
    with pytest.raises(ConfigError, match=r"overrides.yaml: all.power.current_draw_mw: .*-5"):
        NodeSpec(profile="h100", override_file=override).resolve()
