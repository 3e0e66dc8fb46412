"""The NVML state-file writer emits only keys of the key table (native/state-keys.toml): the
library ignores an unknown key, so a misspelt one would silently read N/A."""

from __future__ import annotations

from pathlib import Path

import pytest

from mokka_core.model.node import Node
from mokka_core.model.spec import NodeSpec
from mokka_core.schema.builtin import BUILTIN_PROFILES
from mokka_core.stage import nvml_key_lookup, nvml_keys, render
from mokka_core.stage.nvml_view import render_nvml_state

# every optional branch of the writer, on every GPU (a profile without the block gets it here)
EVERYTHING = """\
version: 1
all:
  inforom: {image_version: G1, oem_object: "2.1", ecc_object: "7.0", pwr_object: "N/A"}
  clocks_throttle_reasons: {gpu_idle: true, sw_power_cap: true,
                            counters: {sw_power_cap_us: 3, sw_thermal_slowdown_us: 2, hw_thermal_slowdown_us: 1,
                                       sync_boost_us: 4}}
  utilization: {gpu: 50, memory: 40, encoder: 3, decoder: 4, jpeg: 5, ofa: 6}
  encoder_stats: {session_count: 1, average_fps: 30, average_latency_us: 7}
  fbc_stats: {session_count: 2, average_fps: 60, average_latency_us: 9}
  ecc:
    errors:
      volatile: {single_bit: {total: 5, l1_cache: 1, l2_cache: 1, register_file: 1, texture_memory: 1},
                 double_bit: {device_memory: 1}}
      aggregate: {single_bit: {total: 9}, double_bit: {l2_cache: 2}}
    sram: {volatile: {correctable: 1, uncorrectable_parity: 1}, aggregate: {uncorrectable_secded: 1},
           threshold_exceeded: true}
  retired_pages: {single_bit_retirement: {count: 1}, double_bit_retirement: {count: 2}, pending_retirement: true}
  remapped_rows: {correctable: 1, uncorrectable: 1, pending: true, failure_occurred: true,
                  availability_histogram: {max: 1, high: 2, partial: 3, low: 4, none: 5}}
  display: {mode: enabled, active: enabled}
  accounting: {mode: enabled, buffer_size: 100}
  virtualization: {mode: passthrough, host_vgpu_mode: sriov}
  processes:
    - {pid: 100, type: "C+G", name: train.py, used_memory_mib: 64, sm_util: 5, mem_util: 4, enc_util: 3, dec_util: 2}
    - {pid: 200, type: G, name: Xorg}
  dynamic_metrics:
    seed: 7
    temperature: {base_c: 50, variance_c: 2, ramp_c: 5, ramp_period_sec: 30}
    power: {base_mw: 300000, variance_mw: 1000}
    utilization: {pattern: burst, gpu_min: 10, gpu_max: 90, memory_min: 5, memory_max: 50, burst_period_sec: 5}
  nvlink_error: {rate: 2.5}
devices:
  '0':
    failure: {mode: lost}
    xid_events: [{code: 79, seq: 1}]
  '1':
    failure: {mode: fallen_off_bus}
    nvlink_error: {rate: 1, links: [0, 2]}
  '2':
    failure: {mode: ecc_uncorrectable}
    xid_events: [{code: 48, seq: 2}, {code: 63, seq: 3}]
    fabric: {state: in_progress, health_mask: 3}
  '3':
    fabric: {state: not_started}
    mig: {mode_current: enabled, mode_pending: enabled, max_gpu_instances: 7}
"""
HEALED = EVERYTHING.replace("nvlink_error: {rate: 2.5}", "nvlink_error: {rate: 0, accrued: [0, 5]}").replace(
    "nvlink_error: {rate: 1, links: [0, 2]}", "nvlink_error: {rate: 0, accrued: [3, 0, 4]}")
SURFACES: list[dict[str, dict[str, object]]] = [
    {},
    {"gpu": {"state": "failed"}, "nvlink": {"state": "failed"}, "fabricmanager": {"state": "failed"}},
    {"nvlink": {"enabled": False}, "fabricmanager": {"enabled": False}, "ib": {"enabled": False}},
]


def rendered_keys(text: str) -> list[str]:
    return [line.partition("=")[0] for line in text.splitlines()[1:-1] if line and not line.startswith("#")]


def renders(profile: str, root: Path) -> list[str]:
    """State files of `profile` in every branch of the writer: plain, with every optional block and
    failure, with surfaces failed and disabled, and healed (the NVLink error counts kept), each with
    the keys of the installed surfaces (their own tests cover what they contribute: ``SimContract``)."""
    root.mkdir(parents=True, exist_ok=True)
    override = root / "override.yaml"
    installed = render.installed_surfaces()
    ctx = render.context(root, booted_ms=1_700_000_000_000)

    def text(node: Node) -> str:
        return render_nvml_state(node, render.with_contributions(ctx, node, installed).nvml)

    texts = []
    for surfaces in SURFACES:
        texts.append(text(NodeSpec(profile=profile, surfaces=surfaces).resolve()))
        for doc in (EVERYTHING, HEALED):
            override.write_text(doc)
            texts.append(text(NodeSpec(profile=profile, gpus=4, override_file=override, surfaces=surfaces).resolve()))
    return texts


@pytest.mark.parametrize("profile", BUILTIN_PROFILES)
def test_writer_emits_only_table_keys(profile: str, tmp_path: Path) -> None:
    unknown = sorted({key for text in renders(profile, tmp_path) for key in rendered_keys(text)
                      if not nvml_key_lookup.is_known_key(key)})
    assert not unknown, (f"{profile}: the writer emits keys that are not in native/state-keys.toml (the library "
                         f"ignores them): {unknown}")


def test_the_renders_reach_every_branch(tmp_path: Path) -> None:
    """The states above exercise what the writer can write: every scope, and the keys that only
    optional blocks, failures, surfaces and re-renders produce."""
    seen: set[tuple[str, str]] = set()
    for profile in BUILTIN_PROFILES:
        for text in renders(profile, tmp_path / profile):
            for key in rendered_keys(text):
                found = nvml_key_lookup.split_key(key)
                assert found is not None, key
                seen.add((found[0], found[2]))
    # link keys are sim-nvlink's (its SimContract checks them against the table)
    assert {scope for scope, _ in seen} | {"link"} == set(nvml_keys.KEYS)
    expected = {
        ("device", "c2c.enabled"),
        ("device", "gpu_numa_node"), ("device", "mig.max_devices"), ("device", "retired_pages.sbe"),
        ("device", "remapped_rows.histogram.none"), ("device", "ecc.aggregate.uncorrected.sram"),
        ("device", "violation.sync_boost_ns"), ("device", "fbc.latency_us"), ("device", "utilization.ofa"),
        ("device", "dynamic.utilization.burst_period_s"), ("device", "dynamic.temperature.ramp_period_s"),
        ("process", "dec_util"), ("event", "data"), ("pcifn", "pcie_switch"), ("device", "cpu_affinity"),
    }
    assert expected <= seen, sorted(expected - seen)
    lost = render_nvml_state(NodeSpec(profile="h100", surfaces={"gpu": {"state": "failed"}}).resolve())
    assert "system.init_error=9" in lost


@pytest.mark.parametrize(("key", "known"), [
    ("system.driver_version", True), ("device.3.nvlink.7.state", True), ("device.3.nvlink.count", True),
    ("device.0.process.31.pid", True), ("event.255.seq", True), ("pcifn.0.bus_id", True),
    ("device.0.clock.video.boost_max", True), ("device.0.ecc.volatile.uncorrected.cbu", True),
    ("device.0.temprature.gpu", False), ("device.3.nvlink.18.state", False), ("device.03.name", False),
    ("device.256.name", False), ("device.0.process.32.pid", False), ("device.0.process.name", False),
    ("Device.0.name", False), ("device.0.nvlink.count.x", False), ("gpu.0.name", False), ("system.", False),
])
def test_is_known_key_routes_as_the_library(key: str, known: bool) -> None:
    assert nvml_key_lookup.is_known_key(key) is known


def test_full_key_helpers_refuse_unknown_keys() -> None:
    assert nvml_key_lookup.link_key(2, 5, nvml_keys.LINK_STATE) == "device.2.nvlink.5.state"
    assert nvml_key_lookup.device_key(1, nvml_keys.DEVICE_NVLINK_COUNT) == "device.1.nvlink.count"
    assert nvml_key_lookup.system_key(nvml_keys.SYSTEM_INIT_ERROR) == "system.init_error"
    with pytest.raises(KeyError, match=r"state-keys\.toml"):
        nvml_key_lookup.device_key(0, "nvlink.cuont")
