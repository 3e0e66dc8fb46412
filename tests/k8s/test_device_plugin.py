"""NVIDIA's Kubernetes device plugin (the pinned k8s-device-plugin release) on every profile, through our client
of the kubelet's device-plugin API (dpclient/main.go).

The plugin runs inside ``mokka run`` without a kubelet (``--kubelet-socket=`` skips registration); its sockets
(``nvidia-<resource>.sock``, fixed under /var/lib/kubelet/device-plugins) go on a private tmpfs. The oracle:
UUIDs and minors as real nvidia-smi 550 reads them through NVML, NUMA nodes and minors as the real machines
have them (boards.py; every capture numbers /dev/nvidia<minor> by index), MIG capability minors by the
driver's rule (/proc/driver/nvidia-caps/mig-minors: 9 per GPU instance, 15 GPU instances per GPU).
"""

from __future__ import annotations

import functools
import json
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from boards import BOARDS, PROFILES
from conftest import mokka_run

from mokka_core.schema.builtin import load_builtin
from mokka_core.testing import consumers

SOCKETS = "/var/lib/kubelet/device-plugins"
CTL = Path(sys.executable).parent / "nvml-mock-ctl"
CONTROL_NODES = ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
OPTIONAL_NODES = {"/dev/nvidia-modeset"}  # the plugin passes it where the node has it (the modeset module loaded)
#: real NVML: a MIG device's name (nvidia-smi -L) and the plugin's resource
MIG_3G, MIG_2G = "mig-3g.40gb", "mig-2g.20gb"


def mig_cap(gpu_minor: int, gi: int, ci: int | None = None) -> str:
    """The driver's capability device of a GPU instance (or its compute instance): mig-minors numbers
    gpu<G>/gi<I>/access 3 + 135 G + 9 I and its ci<C>/access the C + 1 after it."""
    minor = 3 + 135 * gpu_minor + 9 * gi + (0 if ci is None else 1 + ci)
    return f"/dev/nvidia-caps/nvidia-cap{minor}"


def plugin_run(plugin: Path, client: Path, profile: str, *, flags: str = "", client_args: str = "",
               setup: str = "") -> tuple[dict, list[str]]:
    """One ``mokka run``: SETUP, real nvidia-smi's -L and its index, UUID list, then the plugin with FLAGS and
    our client. Returns the client's report and the other lines (SETUP's and nvidia-smi's)."""
    smi = consumers.require("nvidia-smi", version="550")
    log = Path(tempfile.mkdtemp(prefix="mokka-dp-")) / "plugin.log"
    script = (f"{setup}{smi} -L; {smi} --query-gpu=index,uuid --format=csv,noheader; "
              f"mount -t tmpfs tmpfs /var/lib && mkdir -p {SOCKETS} && cd {SOCKETS} && "
              f"{{ {plugin} --kubelet-socket= --fail-on-init-error --pass-device-specs {flags} >{log} 2>&1 & P=$!; }}; "
              f"{client} {client_args}; rc=$?; kill $P; wait $P; exit $rc")
    done = mokka_run(profile, "sh", "-c", script)
    plugin_log = log.read_text() if log.exists() else ""
    shutil.rmtree(log.parent, ignore_errors=True)
    lines = done.stdout.splitlines()
    reports = [json.loads(line) for line in lines if line.startswith("{")]
    assert done.returncode == 0 and reports, (done.stdout[-3000:], done.stderr[-2000:], plugin_log[-3000:])
    return reports[0], [line for line in lines if not line.startswith("{")]


def gpus_of(smi_lines: list[str]) -> list[tuple[int, str]]:
    """(index, UUID) of each GPU, from nvidia-smi --query-gpu."""
    rows = [line.split(", ") for line in smi_lines if line[:1].isdigit()]
    return [(int(index), uuid) for index, uuid in rows]


def expected_numa(profile: str, index: int, count: int) -> list[int]:
    """The real machine's NUMA node of GPU ``index``: a two-socket (or two-Grace) board puts its first half on
    node 0 and the rest on node 1; a one-node VM has only node 0."""
    return [0 if not BOARDS[profile].numa or index < count // 2 else 1]


def paths(allocation: dict) -> list[str]:
    return [device["container_path"] for device in allocation.get("devices", [])]


@functools.cache
def whole_gpus(plugin: Path, client: Path, profile: str) -> tuple[dict, list[tuple[int, str]]]:
    report, smi = plugin_run(plugin, client, profile, client_args="-preferred 2,4")
    return report, gpus_of(smi)


@pytest.mark.consumer
@pytest.mark.parametrize("profile", PROFILES)
def test_the_plugin_lists_every_gpu_with_its_numa_node(device_plugin: Path, dpclient: Path, profile: str) -> None:
    report, gpus = whole_gpus(device_plugin, dpclient, profile)
    count = load_builtin(profile).system.num_devices
    assert len(gpus) == count and report["sockets"] == ["nvidia-gpu.sock"], report["sockets"]
    resource = report["resources"]["gpu"]
    assert resource["options"] == {"get_preferred_allocation_available": True, "pre_start_required": False}
    listed = {device["id"]: device for device in resource["devices"]}
    assert set(listed) == {uuid for _, uuid in gpus}
    for index, uuid in gpus:
        assert listed[uuid]["health"] == "Healthy"
        assert listed[uuid]["numa"] == expected_numa(profile, index, count), (index, listed[uuid])


@pytest.mark.consumer
@pytest.mark.parametrize("profile", PROFILES)
def test_allocate_gives_the_gpus_device_nodes(device_plugin: Path, dpclient: Path, profile: str) -> None:
    report, gpus = whole_gpus(device_plugin, dpclient, profile)
    allocations = {tuple(a["ids"]): a for a in report["resources"]["gpu"]["allocate"]}
    for index, uuid in gpus:  # every capture numbers /dev/nvidia<minor> by index
        allocation = allocations[(uuid,)]
        assert allocation["envs"] == {"NVIDIA_VISIBLE_DEVICES": uuid}
        nodes = paths(allocation)
        assert [p for p in nodes if p not in OPTIONAL_NODES] == [*CONTROL_NODES, f"/dev/nvidia{index}"], nodes
        assert all(d["host_path"] == d["container_path"] and d["permissions"] == "rw" for d in allocation["devices"])
    if len(gpus) > 1:
        everything = allocations[tuple(sorted(uuid for _, uuid in gpus))]
        assert sorted(everything["envs"]["NVIDIA_VISIBLE_DEVICES"].split(",")) == sorted(u for _, u in gpus)
        assert {p for p in paths(everything) if p.startswith("/dev/nvidia") and p[11:].isdigit()} == {
            f"/dev/nvidia{index}" for index, _ in gpus}


@pytest.mark.consumer
@pytest.mark.parametrize("profile", [p for p in PROFILES if load_builtin(p).system.num_devices >= 4])
def test_preferred_allocation_keeps_to_one_numa_node(device_plugin: Path, dpclient: Path, profile: str) -> None:
    """On the NVSwitch boards every pair of GPUs has the same NVLinks, on the GB200/GB300 tray too; the plugin's
    allocator then keeps a set under one CPU, as it would on the real machine."""
    report, gpus = whole_gpus(device_plugin, dpclient, profile)
    node_of = {uuid: expected_numa(profile, index, len(gpus))[0] for index, uuid in gpus}
    for preferred in report["resources"]["gpu"]["preferred"]:
        assert "error" not in preferred, preferred
        assert len(preferred["ids"]) == preferred["size"], preferred
        if preferred["size"] <= len(gpus) // 2:
            assert len({node_of[uuid] for uuid in preferred["ids"]}) == 1, (preferred, node_of)


def health_run(plugin: Path, client: Path, then: str, updates: int, after: str = "") -> tuple[dict, dict[int, str]]:
    report, smi = plugin_run(plugin, client, "h100", client_args=(
        f"-then '{then}' -updates {updates} -settle 3s -timeout 60s" + (f" -after-preferred {after}" if after else "")))
    return report, dict(gpus_of(smi))


def unhealthy(update: dict, uuids: dict[int, str]) -> set[int]:
    index_of = {uuid: index for index, uuid in uuids.items()}
    return {index_of[d["id"]] for d in update["devices"] if d["health"] != "Healthy"}


@pytest.mark.consumer
def test_xids_make_exactly_their_gpus_unhealthy(device_plugin: Path, dpclient: Path) -> None:
    """Xid 13 is an application error the plugin skips; Xid 79 and an uncorrectable ECC error (Xid 48) each
    mark their GPU unhealthy, one ListAndWatch update each, and nothing else follows."""
    report, uuids = health_run(device_plugin, dpclient,
                               f"{CTL} xid 3 13 && {CTL} xid 0 79 && {CTL} fail 1 ecc-uncorrectable", updates=2)
    assert report["then"]["exit"] == 0, report["then"]
    assert [unhealthy(u, uuids) for u in report["updates"]] == [{0}, {0, 1}], report["updates"]


@pytest.mark.consumer
def test_a_gpu_fallen_off_the_bus_is_the_only_one_marked(device_plugin: Path, dpclient: Path) -> None:
    """On a real node the plugin still reads the Xid 79 event's UUID on the handle it attached, so only the lost
    GPU goes unhealthy; and its GetPreferredAllocation then fails for every request, even out of the healthy
    GPUs, at the lost GPU's nvmlDeviceGetNvLinkState (NVIDIA/k8s-device-plugin#2038, pytorch/ci-infra#1057)."""
    report, uuids = health_run(device_plugin, dpclient, f"{CTL} fail 2 fallen-off-bus", updates=1, after="1")
    assert [unhealthy(u, uuids) for u in report["updates"]] == [{2}], report["updates"]
    [after] = report["resources"]["gpu"]["after_preferred"]
    assert "failed to get nvlink state: GPU is lost" in after.get("error", ""), after


MIG_SETUP = (f"{CTL} mig 0 on >/dev/null && {CTL} mig 0 create 3g.40gb,3g.40gb && "
             f"{CTL} mig 1 on >/dev/null && {CTL} mig 1 create 2g.20gb,2g.20gb,2g.20gb && ")


def mig_uuids(smi_lines: list[str]) -> dict[int, list[tuple[str, str]]]:
    """(MIG name, MIG UUID) of each GPU's MIG devices, from nvidia-smi -L."""
    found: dict[int, list[tuple[str, str]]] = {}
    gpu = -1
    for line in smi_lines:
        if line.startswith("GPU "):
            gpu = int(line.split()[1].rstrip(":"))
        elif line.strip().startswith("MIG "):
            found.setdefault(gpu, []).append((line.split()[1], line.split("UUID: ")[1].rstrip(")")))
    return found


def created_gis(output: list[str]) -> dict[int, list[int]]:
    """GPU instance ids nvml-mock-ctl mig create reports: 'ok: GPU 0: created GI 1 (CI 0), GI 2 (CI 0)'."""
    gis = {}
    for line in output:
        if "created GI" in line:
            gpu = int(line.split("GPU ")[1].split(":")[0])
            gis[gpu] = [int(part.split()[0]) for part in line.split("GI ")[1:]]
    return gis


@pytest.mark.consumer
def test_mixed_strategy_serves_each_mig_profile(device_plugin: Path, dpclient: Path) -> None:
    report, smi = plugin_run(device_plugin, dpclient, "h100", setup=MIG_SETUP, flags="--mig-strategy=mixed",
                             client_args=f"-resources gpu,{MIG_3G},{MIG_2G}")
    migs, gis, gpus = mig_uuids(smi), created_gis(smi), gpus_of(smi)
    assert report["sockets"] == ["nvidia-gpu.sock", f"nvidia-{MIG_2G}.sock", f"nvidia-{MIG_3G}.sock"]
    whole = report["resources"]["gpu"]
    assert {d["id"] for d in whole["devices"]} == {uuid for index, uuid in gpus if index >= 2}
    for gpu, resource, name in ((0, MIG_3G, "3g.40gb"), (1, MIG_2G, "2g.20gb")):
        served = report["resources"][resource]
        assert [n for n, _ in migs[gpu]] == [name] * len(gis[gpu])
        assert {d["id"] for d in served["devices"]} == {uuid for _, uuid in migs[gpu]}
        assert all(d["id"].startswith("MIG-") and d["health"] == "Healthy" and d["numa"] == [0]
                   for d in served["devices"])
        caps = set()
        for allocation in served["allocate"]:
            if len(allocation["ids"]) != 1:
                continue
            assert allocation["envs"] == {"NVIDIA_VISIBLE_DEVICES": allocation["ids"][0]}
            nodes = [p for p in paths(allocation) if p not in OPTIONAL_NODES]
            assert nodes[:4] == [*CONTROL_NODES, f"/dev/nvidia{gpu}"], nodes
            caps.add(tuple(nodes[4:]))
        assert caps == {(mig_cap(gpu, gi), mig_cap(gpu, gi, 0)) for gi in gis[gpu]}, caps


@pytest.mark.consumer
def test_single_strategy_serves_the_mig_devices_as_gpus(device_plugin: Path, dpclient: Path) -> None:
    setup = f"{CTL} mig all on >/dev/null && {CTL} mig all create 3g.40gb,3g.40gb && "
    report, smi = plugin_run(device_plugin, dpclient, "h100", setup=setup, flags="--mig-strategy=single")
    migs = mig_uuids(smi)
    assert report["sockets"] == ["nvidia-gpu.sock"]
    served = report["resources"]["gpu"]
    assert {d["id"] for d in served["devices"]} == {uuid for gpu in migs for _, uuid in migs[gpu]}
    assert len(migs) == 8 and all([n for n, _ in migs[gpu]] == ["3g.40gb"] * 2 for gpu in migs), migs
    for allocation in served["allocate"]:
        if len(allocation["ids"]) == 1:
            assert allocation["envs"] == {"NVIDIA_VISIBLE_DEVICES": allocation["ids"][0]}
            assert sum(p.startswith("/dev/nvidia-caps/") for p in paths(allocation)) == 2, allocation


@pytest.mark.consumer
def test_volume_mounts_and_cdi_device_lists(device_plugin: Path, dpclient: Path) -> None:
    """The other device-list strategies: a /dev/null mount per GPU under /var/run/nvidia-container-devices, and
    the CDI device the plugin's generated spec names (the driver root is / here, not a container's mount)."""
    report, smi = plugin_run(device_plugin, dpclient, "l4", flags="--driver-root-ctr-path=/ "
                             "--device-list-strategy=volume-mounts --device-list-strategy=cdi-cri")
    [(_, uuid)] = gpus_of(smi)
    [allocation] = report["resources"]["gpu"]["allocate"]
    assert allocation["envs"] == {"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"}
    assert allocation["mounts"] == [{"container_path": f"/var/run/nvidia-container-devices/{uuid}",
                                     "host_path": "/dev/null", "read_only": False}]
    assert allocation["cdi_devices"] == [f"k8s.device-plugin.nvidia.com/gpu={uuid}"]
