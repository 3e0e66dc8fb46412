"""go-nvlib, the library under the device plugin, GFD, the DRA driver and the container toolkit, on every profile.

Our program (gonvlib/main.go) reads the node both ways go-nvlib does: ``nvpci`` walks /sys/bus/pci/devices
(vendor, device, class, numa_node, the driver and iommu_group links, config's capability lists, resource,
the SR-IOV files) and ``nvlib/device`` and ``nvlib/info`` go through go-nvml. What they find must be the real
board's (boards.py), and the two views must agree on which GPUs there are.
"""

from __future__ import annotations

import functools
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from boards import BOARDS, PROFILES
from conftest import mokka_run

from mokka_core.schema.builtin import load_builtin
from mokka_core.testing import consumers

MIB = 1 << 20
NVIDIA, MELLANOX = 0x10DE, 0x15B3
CLASS_3D, CLASS_NVSWITCH, CLASS_INFINIBAND = 0x030200, 0x068000, 0x020700
#: PCI capability ids (PCI spec): power management, MSI, PCI Express, MSI-X; extended: AER, SR-IOV
CAP_PM, CAP_MSI, CAP_EXP, CAP_MSIX = 0x01, 0x05, 0x10, 0x11
EXT_AER, EXT_SRIOV = 0x01, 0x10
MIG_BOARDS = [profile for profile in PROFILES if BOARDS[profile].mig_profiles]
#: nvidia-smi mig -lgip's profile ids of the smallest 1-slice and the 3-slice GPU instance on 7-slice boards
GI_1G, GI_3G = 19, 9


def read_node(gonvlib: Path, profile: str, before: str = "", nvml_ok: bool = True) -> dict[str, Any]:
    script = f"{before} && {gonvlib}" if before else str(gonvlib)
    ctl = Path(sys.executable).parent
    done = mokka_run(profile, "sh", "-c", f"PATH={ctl}:$PATH; {script}")
    assert done.returncode == 0, f"gonvlib failed on {profile}: {done.stdout[-1000:]}{done.stderr[-2000:]}"
    document: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    assert document["all_error"] == "", document["all_error"]
    if nvml_ok:
        assert document["devices_error"] == "", document["devices_error"]
    return document


@functools.cache
def node(gonvlib: Path, profile: str) -> dict[str, Any]:
    return read_node(gonvlib, profile)


def functions(document: dict[str, Any], vendor: int, pci_class: int) -> list[dict[str, Any]]:
    return [f for f in document["pci"] if f["vendor"] == vendor and f["class"] == pci_class]


@pytest.mark.consumer
@pytest.mark.parametrize("profile", PROFILES)
def test_nvpci_finds_every_gpu_as_the_real_board(gonvlib: Path, profile: str) -> None:
    board = BOARDS[profile]
    document = node(gonvlib, profile)
    gpus = functions(document, NVIDIA, CLASS_3D)
    assert len(gpus) == load_builtin(profile).system.num_devices
    assert document["gpus"] == document["3d_controllers"] == [gpu["address"] for gpu in gpus]
    for gpu in gpus:
        where = f"{profile} {gpu['address']}"
        assert gpu["device"] == board.pci_device, where
        if board.pci_subsystem is not None:
            assert (gpu["subsystem_device"] << 16 | gpu["subsystem_vendor"]) == board.pci_subsystem, where
        assert gpu["driver"] == "nvidia", where
        assert (gpu["config_vendor"], gpu["config_device"]) == (NVIDIA, board.pci_device), where
        assert "config_error" not in gpu, f"{where}: {gpu.get('config_error')}"
        assert {CAP_PM, CAP_MSI, CAP_EXP, CAP_MSIX} <= set(gpu["standard_caps"]), where
        assert EXT_AER in gpu["extended_caps"], where
        sizes = {int(index): size for index, size in gpu["bar_sizes"].items()}
        if board.bar0_mib is not None:
            assert sizes[0] == board.bar0_mib * MIB, where
            assert gpu["addressable_32"] == sizes[0], where  # BAR0 is the one 32-bit window
        if board.bar1_mib is not None:
            assert sizes[1] == board.bar1_mib * MIB, where
        assert gpu["addressable_64"] == sum(size for index, size in sizes.items() if index != 0), where
        assert (gpu["total_vfs"] is not None) == board.sriov == (EXT_SRIOV in gpu["extended_caps"]), where
        if board.sriov:
            assert gpu["total_vfs"] > 0 and gpu["num_vfs"] == 0, where
        assert not gpu["is_vf"], where
    # the kernel gives a function ``reset`` when it can reset it: FLR, advertised in its PCIe DevCap
    for function in document["pci"]:
        assert function["reset_available"] == function["flr_capable"], function["address"]
    assert all(gpu["reset_available"] for gpu in gpus), "the boards' DevCap offers FLR: reset must be there"
    numa = [gpu["numa_node"] for gpu in gpus]
    if board.numa:
        assert min(numa) >= 0 and len(set(numa)) >= min(2, len(gpus)), numa
    else:
        assert set(numa) <= {-1, 0}, numa


@pytest.mark.consumer
@pytest.mark.parametrize("profile", PROFILES)
def test_nvpci_finds_the_nvswitches_and_hcas(gonvlib: Path, profile: str) -> None:
    board = BOARDS[profile]
    document = node(gonvlib, profile)
    switches = functions(document, NVIDIA, CLASS_NVSWITCH)
    assert document["nvswitches"] == [switch["address"] for switch in switches]
    if board.nvswitches is not None:
        count, device = board.nvswitches
        assert len(switches) == count
        assert {switch["device"] for switch in switches} <= {device}
    assert all(switch["driver"] == "nvidia" for switch in switches), switches
    hcas = functions(document, MELLANOX, CLASS_INFINIBAND)
    num_gpus = len(document["gpus"])
    assert len(hcas) == (num_gpus if board.rdma else 0)  # one compute-rail HCA per GPU
    assert all(hca["driver"] == "mlx5_core" and hca["numa_node"] >= 0 for hca in hcas), hcas
    groups = [f["iommu_group"] for f in document["pci"]]
    assert min(groups) >= 0 and len(set(groups)) == len(groups), groups


@pytest.mark.consumer
@pytest.mark.parametrize("profile", PROFILES)
def test_nvlib_devices_are_the_real_boards(gonvlib: Path, profile: str) -> None:
    board = BOARDS[profile]
    document = node(gonvlib, profile)
    devices = document["devices"]
    assert sorted(device["pci_bus_id"] for device in devices) == document["gpus"]
    for device in devices:
        where = f"{profile} GPU {device['index']}"
        assert device["errors"] == [], where
        assert device["nvpci_address"] == device["pci_bus_id"], where  # NVML's bus id names its sysfs function
        assert device["architecture"] == board.architecture_name, where
        assert device["brand"] == board.brand, where
        assert device["compute_capability"] == "{}.{}".format(*board.compute_capability), where
        assert device["mig_capable"] == board.mig_capable, where
        assert not device["mig_enabled"] and device["mig_devices"] == [], where
        assert device["fabric_attached"] == board.fabric_attached, where
        if board.addressing_mode is not None:
            assert device["addressing_mode"] == board.addressing_mode, where
        assert device["coherent"] == (device["addressing_mode"] == "ATS"), where
    assert document["info"] == {"has_nvml": True, "has_tegra_files": False, "has_dxcore": False,
                                "has_integrated_gpu": False, "integrated_reason": "no integrated GPUs found",
                                "platform": "nvml"}


def slices(name: str) -> str:
    """A GPU-instance profile's name without its compute-instance part: 1c.3g.40gb -> 3g.40gb."""
    return re.sub(r"^\d+c\.", "", name)


@pytest.mark.consumer
@pytest.mark.parametrize("profile", MIG_BOARDS)
def test_mig_devices_and_profiles_as_the_real_library_names_them(gonvlib: Path, profile: str) -> None:
    """After ``nvml-mock-ctl mig`` partitions GPU 0 (by profile id: the names are what is under test),
    VisitMigDevices lists its instances under the names go-nvlib forms from NVML's profile info, and
    GetMigProfiles offers exactly the board's GPU-instance profiles (with the compute-instance splits of each)."""
    board = BOARDS[profile]
    smallest, three_slices = board.mig_profiles[0], next(p for p in board.mig_profiles if p.startswith("3g."))
    document = read_node(gonvlib, profile, f"nvml-mock-ctl mig 0 on && nvml-mock-ctl mig 0 create {GI_1G},{GI_3G}")
    partitioned, *others = document["devices"]
    assert partitioned["errors"] == [], partitioned["errors"]
    assert partitioned["mig_enabled"]
    assert sorted(mig["profile"] for mig in partitioned["mig_devices"]) == sorted([smallest, three_slices])
    assert all(mig["uuid"].startswith("MIG-") and "error" not in mig for mig in partitioned["mig_devices"])
    offered = partitioned["mig_profiles"]
    assert {name for name in offered if not re.match(r"^\d+c\.", name)} == set(board.mig_profiles)
    assert {slices(name) for name in offered} == set(board.mig_profiles)
    assert "1c.7g." + board.mig_profiles[-1].split(".", 1)[1] in offered
    assert document["mig_parse_errors"] == []
    for device in others:
        assert not device["mig_enabled"] and device["mig_devices"] == [], device


@pytest.mark.consumer
def test_compute_instances_made_by_nvidia_smi_are_named_as_their_split(gonvlib: Path) -> None:
    """Real nvidia-smi 550 makes a 3-slice GPU instance with two 1-slice compute instances (profile id 0,
    "MIG 1c.3g.40gb" in its own output): go-nvlib sees two MIG devices and names each 1c.3g.40gb."""
    smi = consumers.require("nvidia-smi", version="550")
    # a lone 3g goes to 4:4, GPU instance 2, as on real boards
    document = read_node(gonvlib, "h100", f"{smi} -i 0 -mig 1 >/dev/null && {smi} mig -i 0 -cgi {GI_3G} >/dev/null "
                                          f"&& {smi} mig -i 0 -gi 2 -cci 0,0 >/dev/null")
    partitioned = document["devices"][0]
    assert partitioned["errors"] == [], partitioned["errors"]
    assert [mig["profile"] for mig in partitioned["mig_devices"]] == ["1c.3g.40gb", "1c.3g.40gb"]
    assert len({mig["uuid"] for mig in partitioned["mig_devices"]}) == 2


@pytest.mark.consumer
def test_a_gpu_fallen_off_the_bus_keeps_its_ids_but_its_config_reads_all_ones(gonvlib: Path) -> None:
    """The kernel keeps what it cached at enumeration (vendor, device, class), while every config read of a
    GPU that fell off the bus completes as all ones: go-nvlib still lists the GPU, and its capability walk
    meets the 0xff pointer it rejects as a broken config space. Its NVML view stops at that GPU, whose
    handle is GPU_IS_LOST "if the target GPU has fallen off the bus" (nvml.h, nvmlDeviceGetHandleByIndex)."""
    document = read_node(gonvlib, "h100", "nvml-mock-ctl fail 2 fallen-off-bus", nvml_ok=False)
    broken = [f for f in document["pci"] if "config_error" in f]
    assert len(broken) == 1 and broken[0]["address"] in document["gpus"], broken
    lost = broken[0]
    assert (lost["vendor"], lost["device"], lost["class"]) == (NVIDIA, BOARDS["h100"].pci_device, CLASS_3D)
    assert lost["config_vendor"] == 0xFFFF and lost["config_error"] == "config space broken"
    assert document["devices_error"] == "error getting device handle for index '2': GPU is lost"
