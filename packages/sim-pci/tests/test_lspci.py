"""The real lspci (pciutils) reads the staged tree through its relocatable sysfs backend."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from mokka_core.model.spec import NodeSpec

pytestmark = pytest.mark.consumer


@pytest.mark.parametrize(
    ("profile", "ids", "speed", "width"),
    # the link each board's capture trained (reference/captures/qx-<board>.xml: the T4 host's slot runs x8)
    [("h100", "10de:2330", "32GT/s", "x16"), ("a100", "10de:20b0", "16GT/s", "x16"),
     ("t4", "10de:1eb8", "8GT/s", "x8")],
)
def test_gpus_listed_with_driver_and_link(staged, lspci, profile: str, ids: str, speed: str, width: str) -> None:
    root = staged(profile)
    out = lspci(root, "-nn", "-vvv", "-k")
    bus_ids = [gpu.bus_id for gpu in NodeSpec(profile=profile).resolve().gpus]
    blocks = {block.split(" ", 1)[0]: block for block in out.strip().split("\n\n")}
    for bus_id in bus_ids:
        block = blocks[bus_id.removeprefix("0000:")]
        assert re.search(rf"3D controller \[0302\]: NVIDIA Corporation .*\[{ids}\]", block), block
        assert "Kernel driver in use: nvidia" in block
        assert f"LnkSta:\tSpeed {speed}, Width {width}" in block
        assert f"LnkCap:\tPort #0, Speed {speed}, Width x16" in block
        assert "MSI-X: Enable+" in block
        assert "Power Management version 3" in block


def test_h100_switches_and_hcas(staged, lspci) -> None:
    out = lspci(staged("h100"), "-nn", "-k")
    assert out.count("Bridge [0680]: NVIDIA Corporation") == 4
    assert out.count("Infiniband controller [0207]: Mellanox Technologies") == 8
    assert out.count("Kernel driver in use: mlx5_core") == 8


def test_gpu_disabled_leaves_devices_without_driver(staged, lspci) -> None:
    out = lspci(staged("h100", gpu={"enabled": False}), "-nn", "-k", "-d", "10de:2330")
    assert out.count("3D controller [0302]") == 8
    assert "Kernel driver in use" not in out


def test_pci_failed_config_reads_ff(staged, lspci) -> None:
    root = staged("t4", pci={"state": "failed"})
    out = lspci(root, "-x", "-s", "00:1e.0")
    assert "00: ff ff ff ff ff ff ff ff ff ff ff ff ff ff ff ff" in out
    assert "Unknown header type 7f" in lspci(root, "-v", "-s", "00:1e.0")


def test_numa_node_and_iommu_group_are_shown(staged, lspci) -> None:
    out = lspci(staged("h100"), "-vv", "-s", "9d:00.0")
    assert "NUMA node: 1" in out
    assert re.search(r"IOMMU group: \d+", out)


@pytest.mark.root
def test_plain_lspci_in_a_private_namespace_with_sys_overlaid(staged, lspci_bin) -> None:
    """How `mokka run` delivers: the staged sys overlaid on /sys, lspci with no relocation flag."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare for a private mount namespace")
    root = staged("h100")
    script = f"mount -t overlay overlay -o lowerdir={root}/sys:/sys /sys && {lspci_bin} -nn -k -d 10de:2330"
    result = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-ec", script],
                            capture_output=True, text=True, timeout=60)
    if result.returncode != 0 and "overlay" in result.stderr:
        pytest.skip(f"overlay over /sys is not allowed here: {result.stderr.strip()}")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("3D controller [0302]: NVIDIA Corporation") == 8
    assert result.stdout.count("Kernel driver in use: nvidia") == 8


@pytest.mark.parametrize(("profile", "total"), [("h100", 32), ("a100", 16), ("l40s", 32), ("b200", 32)])
def test_sriov_capable_gpus_show_the_capability_with_no_vf_enabled(staged, lspci, profile: str, total: int) -> None:
    root = staged(profile)
    gpu = NodeSpec(profile=profile).resolve().gpus[0].bus_id
    block = lspci(root, "-vvv", "-s", gpu.removeprefix("0000:"))
    assert re.search(r"Capabilities: \[180 v1\] Single Root I/O Virtualization \(SR-IOV\)", block), block
    assert f"Initial VFs: {total}, Total VFs: {total}, Number of VFs: 0" in block
    assert "IOVCtl:\tEnable-" in block
    device = root / "sys/bus/pci/devices" / gpu
    assert (device / "sriov_totalvfs").read_text() == f"{total}\n"  # NFD: pci-10de.sriov.capable=true
    assert (device / "sriov_numvfs").read_text() == "0\n"
    assert (device / "sriov_offset").read_text() == "4\n" and (device / "sriov_stride").read_text() == "1\n"


def test_a_t4_has_no_sriov(staged, lspci) -> None:
    root = staged("t4")
    assert "SR-IOV" not in lspci(root, "-vvv")
    assert not list((root / "sys/bus/pci/devices").glob("*/sriov_totalvfs"))
