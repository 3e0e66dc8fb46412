"""Golden tests of the renderers: the kernel module's procfs formats and /proc/modules lines."""

from __future__ import annotations

import re
import time

import pytest

from mokka_core.model.identity import legacy_irq
from mokka_core.model.inputs import Inputs
from mokka_core.model.resolve import resolve
from mokka_core.schema.builtin import load_builtin
from mokka_core.schema.overlays import Override
from mokka_sim_gpu.modules import loaded_modules, render_proc_modules
from mokka_sim_gpu.render_proc import render_information, render_params, render_version


def test_version_file() -> None:
    text = render_version("550.163.01", machine="x86_64")
    first, second = text.splitlines()
    assert first.startswith("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.163.01  ")
    assert first.endswith(" UTC 2025")
    assert second.startswith("GCC version:  gcc version ")


@pytest.mark.parametrize(("version", "built"), [
    # real nodes' /proc/driver/nvidia/version and boot logs
    ("550.163.01", "Tue Apr  8 12:41:17 UTC 2025"),
    ("580.105.08", "Wed Oct 29 23:15:11 UTC 2025"),
])
def test_each_driver_version_carries_its_own_build_date(version: str, built: str) -> None:
    assert render_version(version, machine="x86_64").splitlines()[0] == (
        f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {version}  {built}")


def test_params_list_every_registry_key_in_module_order() -> None:
    lines = render_params().splitlines()
    assert lines[0] == "ResmanDebugLevel: 4294967295"
    assert "DeviceFileMode: 438" in lines
    assert "ImexChannelCount: 2048" in lines
    assert lines[-1] == 'ExcludedGpus: ""'
    assert len(lines) == 35 + 6


def test_h100_information(make_node) -> None:
    gpu = make_node("h100").gpus[0]
    assert render_information(gpu) == (
        "Model: \t\t NVIDIA H100 80GB HBM3\n"
        f"IRQ:   \t\t {legacy_irq('0000:1b:00.0')}\n"
        f"GPU UUID: \t {gpu.uuid}\n"
        "Video BIOS: \t 96.00.99.00.01\n"
        "Bus Type: \t PCIe\n"
        "DMA Size: \t 52 bits\n"
        "DMA Mask: \t 0xfffffffffffff\n"
        "Bus Location: \t 0000:1b:00.0\n"
        "Device Minor: \t 0\n"
        "GPU Firmware: \t 550.163.01\n"
        "GPU Excluded:\t No\n"
    )


def test_t4_information_has_its_gsp_firmware_and_47_bit_dma(make_node) -> None:
    # Tesla T4 uses GSP firmware by default from driver 535 (the driver README's GSP chapter lists 1EB8;
    # reference/captures/qx-t4.xml: gsp_firmware_version is the driver's)
    text = render_information(make_node("t4").gpus[0])
    assert "Model: \t\t Tesla T4\n" in text
    assert "DMA Size: \t 47 bits\nDMA Mask: \t 0x7fffffffffff\n" in text
    assert "GPU Firmware: \t 550.163.01\n" in text


def test_information_has_no_gsp_firmware_where_gsp_is_off() -> None:
    override = Override.model_validate({"all": {"gsp_firmware": {"mode": "disabled", "version": ""}}})
    state = resolve(Inputs(profile=load_builtin("t4"), profile_source="t4.yaml", override=override))
    assert "GPU Firmware" not in render_information(state.gpus[0])


def test_lost_gpu_information_has_no_uuid() -> None:
    override = Override.model_validate({"devices": {"1": {"failure": {"mode": "fallen_off_bus"}}}})
    state = resolve(Inputs(profile=load_builtin("h100"), profile_source="h100.yaml", override=override))
    text = render_information(state.gpus[1])
    assert "GPU UUID" not in text
    assert "Video BIOS: \t ??.??.??.??.??\n" in text
    assert "Bus Location: \t 0000:43:00.0\n" in text


def test_proc_modules_lines(make_node) -> None:
    lines = render_proc_modules(loaded_modules(make_node("h100"))).splitlines()
    assert [line.split()[0] for line in lines] == ["nvidia_peermem", "nvidia_drm", "nvidia_modeset", "nvidia_uvm",
                                                   "nvidia", "mlx5_ib", "ib_uverbs", "ib_core", "mlx5_core"]
    # the kernel's own InfiniBand stack (the DGX H100's ConnectX-7 HCAs): in tree, so no taint column
    assert lines[7].split()[2:5] == ["3", "mlx5_ib,ib_uverbs,nvidia_peermem,", "Live"] and len(lines[7].split()) == 6
    name, size, refcnt, deps, state, address, taint = lines[4].split()
    assert (name, deps, state, taint) == ("nvidia", "nvidia_uvm,nvidia_peermem,nvidia_modeset,", "Live", "(POE)")
    assert int(size) % 4096 == 0 and int(address, 16) > 0
    assert int(refcnt) == 3 + 8 + 1  # three holder modules, persistenced's eight GPUs and nvidiactl
    assert lines[2].split()[2:4] == ["1", "nvidia_drm,"]
    assert lines[1].split()[2:4] == ["0", "-"]
    l40s = render_proc_modules(loaded_modules(make_node("l40s"))).splitlines()
    assert [line.split()[0] for line in l40s] == ["nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia"]


def test_gpudirect_modules_load_where_the_profile_says(make_node) -> None:
    """nvidia_peermem holds nvidia and ib_core (only with HCAs), gdrdrv holds nvidia, nvidia_fs stands alone."""
    from mokka_core.schema.profile import GpuDirect

    def every(name: str):
        profile = load_builtin(name)
        system = profile.system.model_copy(update={"gpudirect": GpuDirect(rdma=True, storage=True, gdrcopy=True)})
        return resolve(Inputs(profile=profile.model_copy(update={"system": system}), profile_source=f"{name}.yaml"))

    modules = {m.name: m for m in loaded_modules(every("h100"))}
    assert list(modules)[:4] == ["gdrdrv", "nvidia_fs", "nvidia_peermem", "nvidia_drm"]
    assert modules["nvidia"].holders == ("nvidia_uvm", "nvidia_peermem", "nvidia_modeset", "gdrdrv")
    assert "nvidia_peermem" in modules["ib_core"].holders and modules["nvidia_fs"].holders == ()
    assert (modules["gdrdrv"].taint, modules["nvidia_peermem"].taint, modules["mlx5_core"].taint) == ("OE", "POE", "")
    no_hcas = {m.name for m in loaded_modules(every("l40s"))}
    assert "nvidia_peermem" not in no_hcas and {"gdrdrv", "nvidia_fs"} <= no_hcas
    assert not {"mlx5_core", "ib_core"} & no_hcas
    # the built-in DGX profiles load nvidia_peermem (system.gpudirect.rdma), nothing else of GPUDirect
    assert {"gdrdrv", "nvidia_fs", "nvidia_peermem"} & {m.name for m in loaded_modules(make_node("h100"))} == {
        "nvidia_peermem"}


def test_kmod_index_matches_libkmod_layout() -> None:
    from mokka_sim_gpu.kernel_objects import kmod_index

    data = kmod_index([("ab", "x"), ("ac", "y")])
    assert data[:8] == bytes.fromhex("b007f45700020001")
    root = int.from_bytes(data[8:12], "big")
    assert root >> 28 == 0xA  # prefix "a" and children
    assert data[root & 0x0FFFFFFF:][:4] == b"a\0bc"


def test_module_objects_carry_a_modinfo_section() -> None:
    from mokka_sim_gpu.kernel_objects import elf_object

    blob = elf_object([("name", "nvidia"), ("version", "550.163.01")], "x86_64")
    assert blob[:4] == b"\x7fELF" and blob[4] == 2
    assert b"name=nvidia\0version=550.163.01\0" in blob and b".modinfo\0" in blob


def test_kernel_log_prints_each_xid_as_the_driver_does(make_node) -> None:
    """/dev/kmsg records (pri,seq,usec,flags;text), time stamps from the Xid records, the driver's wording."""
    from mokka_core.model.apply import apply
    from mokka_sim_gpu.kernel_log import kernel_log

    node = apply(make_node("h100", gpus=2), {"devices": {
        "1": {"xid_events": [{"code": 79, "seq": 2, "usec": 7_250_000}]},
        "0": {"xid_events": [{"code": 13, "seq": 1, "usec": 5_000_001}, {"code": 48, "seq": 3}]},
    }})
    assert kernel_log(node).splitlines()[5:] == [
        "4,6,5000001,-;NVRM: Xid (PCI:0000:1b:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception "
        "on (GPC 1, TPC 3, SM 0): Out Of Range Address",
        "4,7,7250000,-;NVRM: Xid (PCI:0000:43:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
        "4,8,7250000,-;NVRM: GPU 0000:43:00.0: GPU has fallen off the bus.",
        # nv.c's three lines in one record, the line breaks escaped as /dev/kmsg escapes them
        "4,9,7250000,-;NVRM: The NVIDIA GPU 0000:43:00.0\\x0aNVRM: (PCI ID: 10de:2330) installed in this system "
        "has\\x0aNVRM: fallen off the bus and is not responding to commands.",
        "4,10,0,-;NVRM: Xid (PCI:0000:1b:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit "
        "error (DBE) has been detected on GPU in the framebuffer at partition 0, subpartition 0.",
    ]


def test_an_nvlink_error_is_xid_74_and_on_nvswitch_boards_an_sxid(make_node) -> None:
    """Xid 74 names the link (real nodes' wording); on HGX H100 the link's switch reports SXid 20009 (non-fatal)."""
    from mokka_core.model.apply import apply
    from mokka_sim_gpu.kernel_log import kernel_log

    def log(profile: str) -> list[str]:
        node = make_node(profile, gpus=2)
        link = node.gpus[1].links[0].link
        node = apply(node, {"devices": {"1": {"nvlink_error": {"rate": 5.0, "links": [link]},
                                               "xid_events": [{"code": 74, "seq": 1, "usec": 9_000_000}]}}})
        return kernel_log(node).splitlines()[5:]

    h100 = log("h100")
    assert h100[0] == ("4,6,9000000,-;NVRM: Xid (PCI:0000:43:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal "
                       "error detected on link 0(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)")
    assert len(h100) == 2 and re.fullmatch(r"4,7,9000000,-;nvidia-nvswitch\d: SXid \(PCI:0000:[0-9a-f]{2}:00\.0\): "
                                           r"20009, Non-fatal, Link \d+ RX Short Error Rate", h100[1]), h100
    assert len(log("gb200")) == 1  # a compute tray's switches are in the switch trays: no SXid on this node


def test_kernel_log_loading_lines_are_stamped_when_the_node_came_up(make_node) -> None:
    from mokka_sim_gpu.kernel_log import kernel_log, uptime_usec

    assert {line.split(",")[2] for line in kernel_log(make_node("h100"), 12_345_678).splitlines()} == {"12345678"}
    ten_seconds_ago = time.time_ns() // 1_000_000 - 10_000
    stamp, now = uptime_usec(ten_seconds_ago), time.monotonic_ns() // 1000 - 10_000_000
    assert now - 2_100_000 < stamp <= now  # never after the Xids raised since (stamped on the monotonic clock)
    assert uptime_usec(ten_seconds_ago) == stamp  # the same in every plan


def test_kernel_log_starts_with_the_drivers_loading_lines(make_node) -> None:
    """Never empty while the driver is loaded (dmesg would read the host's log through syslog(2) instead);
    the wording of real nodes' boot logs, the banner that of /proc/driver/nvidia/version."""
    from mokka_sim_gpu.kernel_log import kernel_log
    from mokka_sim_gpu.render_proc import render_version

    banner = render_version("550.163.01").splitlines()[0].removeprefix("NVRM version: ")
    assert kernel_log(make_node("h100")).splitlines() == [
        "4,1,0,-;nvidia: loading out-of-tree module taints kernel.",
        "4,2,0,-;nvidia: module license 'NVIDIA' taints kernel.",
        f"4,3,0,-;NVRM: loading {banner}",
        "4,4,0,-;nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver for UNIX platforms  550.163.01  "
        f"{banner.rsplit('550.163.01  ', 1)[1]}",
        "4,5,0,-;nvidia-uvm: Loaded the UVM driver, major device number 509.",
    ]
