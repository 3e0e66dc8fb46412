"""go-nvml, the NVML binding of every Kubernetes GPU component, against the mock library on every profile.

Our program (gonvml/main.go) calls each getter of go-nvml's ``Device`` interface, plus the common ones
with simple arguments, on every GPU. A getter must not crash, must never answer FUNCTION_NOT_FOUND, may be
absent only where the real 550 library lacks the export too, and the identity it reports is the real board's.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import pytest
from boards import BOARDS, PROFILES
from conftest import mokka_run

from mokka_core.schema.builtin import load_builtin

REPO = Path(__file__).resolve().parents[2]
#: every name the mock exports (the real 535/550/555 lists and the newest header's functions)
EXPORTS = {line for line in (REPO / "native" / "exports.txt").read_text().split("\n") if line and line[0] != "#"}
MIB = 1 << 20
GPU_FABRIC_STATE_COMPLETED = 3
#: what every real board of these answers (the captures show a value for each)
ALWAYS_ANSWERED = ("GetName", "GetUUID", "GetSerial", "GetPciInfo", "GetIndex", "GetMinorNumber",
                   "GetBoardPartNumber", "GetVbiosVersion", "GetMemoryInfo", "GetMemoryInfo_v2",
                   "GetCudaComputeCapability", "GetArchitecture", "GetPowerUsage", "GetTemperature(GPU)",
                   "GetUtilizationRates", "GetTotalEnergyConsumption", "GetPerformanceState",
                   "GetPowerManagementLimit", "GetMaxPcieLinkWidth", "GetCurrPcieLinkGeneration")


@functools.cache
def run_gonvml(gonvml: Path, profile: str) -> tuple[int, dict[int, dict[str, dict[str, object]]]]:
    done = mokka_run(profile, str(gonvml))
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    calling = [line["calling"] for line in lines if "calling" in line]
    assert done.returncode == 0, f"gonvml crashed (last call started: {calling[-1:]}): {done.stderr[-2000:]}"
    calls: dict[int, dict[str, dict[str, object]]] = {}
    for line in lines:
        if "call" in line:
            calls.setdefault(line["gpu"], {})[line["call"]] = line
    return lines[0]["count"], calls


@pytest.mark.consumer
@pytest.mark.parametrize("profile", PROFILES)
def test_every_device_getter_on_every_gpu(gonvml: Path, profile: str) -> None:
    count, calls = run_gonvml(gonvml, profile)
    assert count == load_builtin(profile).system.num_devices
    assert sorted(calls) == list(range(count))
    names = set(calls[0])
    assert len(names) > 180, sorted(names)
    for gpu, results in calls.items():
        assert set(results) == names, f"GPU {gpu} missed calls: {names ^ set(results)}"
        not_found = [name for name, r in results.items() if r["return"] == "ERROR_FUNCTION_NOT_FOUND"
                     or r["return"] == "Function Not Found"]
        assert not not_found, f"GPU {gpu}: FUNCTION_NOT_FOUND from {not_found}"
        absent = {name.split("(")[0] for name, r in results.items() if r["return"] == "absent"}
        hidden = {f"nvmlDevice{name}" for name in absent} & EXPORTS
        assert not hidden, f"exports.txt lists these, the mock does not export them: {sorted(hidden)}"
        unanswered = {name: results[name]["return"] for name in ALWAYS_ANSWERED if results[name]["return"] != "Success"}
        assert not unanswered, f"GPU {gpu}: {unanswered}"


@pytest.mark.consumer
@pytest.mark.parametrize("profile", PROFILES)
def test_identity_is_the_real_boards(gonvml: Path, profile: str) -> None:
    board = BOARDS[profile]
    _, calls = run_gonvml(gonvml, profile)
    for gpu, results in calls.items():
        value = {name: result.get("value") for name, result in results.items()}
        assert value["GetName"] == board.name, f"GPU {gpu}"
        memory = value["GetMemoryInfo"]
        assert isinstance(memory, dict) and memory["Total"] == board.fb_total_mib * MIB, f"GPU {gpu}: {memory}"
        assert value["GetCudaComputeCapability"] == list(board.compute_capability), f"GPU {gpu}"
        assert value["GetArchitecture"] == board.architecture, f"GPU {gpu}"
        assert (results["GetMigMode"]["return"] == "Success") == board.mig_capable, f"GPU {gpu}"
        fabric = results["GetGpuFabricInfo"]
        if board.fabric:
            info = fabric.get("value")
            assert isinstance(info, dict), f"GPU {gpu}: {fabric}"
            assert (info["State"], info["Status"]) == (GPU_FABRIC_STATE_COMPLETED, 0), f"GPU {gpu}: {info}"
        else:
            assert fabric["return"] == "Not Supported", f"GPU {gpu}: {fabric}"


@pytest.mark.consumer
def test_events_as_the_device_plugin_health_check_sees_them(gonvml: Path, tmp_path: Path) -> None:
    """Xid and ECC events reach a go-nvml event set on the GPU they were raised on.

    The device plugin marks a GPU unhealthy from these events and, when the event device's UUID cannot
    be read, every GPU. On a real node a GPU that falls off the bus keeps the UUID its handle was attached
    with: the plugin marks only that GPU (NVIDIA/k8s-device-plugin#2038; test_device_plugin.py).
    """
    ctl = Path(sys.executable).parent / "nvml-mock-ctl"
    out = tmp_path / "events.jsonl"
    script = (f"{gonvml} -events 4 -timeout 60s > {out} & P=$!; "
              f"until grep -q ready {out} 2>/dev/null; do sleep 0.1; done; "
              f"{ctl} xid 0 79 && {ctl} fail 1 ecc-uncorrectable && {ctl} xid 3 13 && {ctl} fail 2 fallen-off-bus "
              f"&& wait $P")
    done = mokka_run("h100", "sh", "-c", script)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    uuids = {line["gpu"]: line["uuid"] for line in lines if "uuid" in line and "gpu" in line}
    events = [(line["uuid"], line["xid"], line["uuid_return"]) for line in lines if "event_type" in line]
    assert events == [(uuids[0], 79, "Success"), (uuids[1], 48, "Success"), (uuids[3], 13, "Success"),
                      (uuids[2], 79, "Success")], lines
