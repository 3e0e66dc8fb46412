"""The sysfs tree: the kernel's file formats, links, and what each surface state shows."""

from __future__ import annotations

import os
from pathlib import Path

from mokka_core.model.identity import legacy_irq
from mokka_sim_pci.devices import cpu_count, pci_functions
from mokka_sim_pci.sysfs import cpumask, resource_table

H100_GPU = "0000:1b:00.0"


def read(root: Path, bdf: str, name: str) -> str:
    return (root / "sys/bus/pci/devices" / bdf / name).read_text()


def test_cpumask_groups_like_the_kernel() -> None:
    assert cpumask([0, 1, 2, 3], 4) == "f"
    assert cpumask(list(range(0, 56)) + list(range(112, 168)), 224) == (
        "00000000,000000ff,ffffffff,ffff0000,00000000,00ffffff,ffffffff"
    )
    assert cpumask([35], 36) == "8,00000000"


def test_resource_lines_per_bar(make_node) -> None:
    fn = next(f for f in pci_functions(make_node("h100")) if f.kind == "gpu")
    lines = resource_table(fn.function.bars).splitlines()
    assert len(lines) == 13
    start, end, flags = (int(x, 16) for x in lines[0].split())
    assert end - start + 1 == 16 << 20 and flags == 0x40200
    start, end, flags = (int(x, 16) for x in lines[1].split())
    assert end - start + 1 == 128 << 30 and flags == 0x14220C
    assert lines[2] == "0x0000000000000000 0x0000000000000000 0x0000000000000000"


def test_h100_device_files(staged) -> None:
    root = staged("h100", host_cpus="0-223")  # a host with the DGX's own CPUs
    assert os.readlink(root / "sys/bus/pci/devices" / H100_GPU) == f"../../../devices/pci0000:15/{H100_GPU}"
    assert read(root, H100_GPU, "vendor") == "0x10de\n"
    assert read(root, H100_GPU, "device") == "0x2330\n"
    assert read(root, H100_GPU, "class") == "0x030200\n"
    assert read(root, H100_GPU, "subsystem_vendor") == "0x10de\n"
    assert read(root, H100_GPU, "subsystem_device") == "0x16c1\n"
    assert read(root, H100_GPU, "revision") == "0xa1\n"
    assert read(root, H100_GPU, "irq") == f"{legacy_irq(H100_GPU)}\n"
    assert read(root, H100_GPU, "numa_node") == "0\n"
    assert read(root, H100_GPU, "local_cpulist") == "0-55,112-167\n"
    assert read(root, H100_GPU, "current_link_speed") == "32.0 GT/s PCIe\n"
    assert read(root, H100_GPU, "max_link_width") == "16\n"
    assert read(root, H100_GPU, "enable") == "1\n"
    assert len((root / "sys/bus/pci/devices" / H100_GPU / "config").read_bytes()) == 4096
    device = root / "sys/devices/pci0000:15" / H100_GPU
    assert os.readlink(device / "driver") == "../../../bus/pci/drivers/nvidia"
    assert (device / "driver" / H100_GPU).resolve() == device.resolve()
    group = os.readlink(device / "iommu_group")
    assert (device / group / "devices" / H100_GPU).resolve() == device.resolve()
    second_socket = root / "sys/bus/pci/devices/0000:9d:00.0"
    assert os.readlink(second_socket).startswith("../../../devices/pci0000:98/")
    assert (second_socket / "numa_node").read_text() == "1\n"


def test_every_function_can_be_reset_by_flr(staged) -> None:
    """The kernel gives a function ``reset`` and ``reset_method`` when it finds a reset method: FLR, which
    the config image's DevCap advertises (go-nvlib's IsResetAvailable and mig-parted's GPU reset look
    for ``reset``)."""
    root = staged("h100")
    for bdf in (H100_GPU, "0000:05:00.0", "0000:1a:00.0"):  # a GPU, an NVSwitch, an HCA
        function = root / "sys/bus/pci/devices" / bdf
        assert (function / "reset_method").read_text() == "flr\n"
        assert (function / "reset").stat().st_mode & 0o777 == 0o200
        config = (function / "config").read_bytes()
        devcap = int.from_bytes(config[0x64:0x68], "little")  # PCI Express capability at 0x60, DevCap +4
        assert config[0x60] == 0x10 and devcap & (1 << 28), bdf
        pmcsr = int.from_bytes(config[0x44:0x46], "little")  # PM capability at 0x40: no PM reset
        assert pmcsr & 0x8, bdf


def test_switches_and_hcas(staged) -> None:
    root = staged("h100")
    assert read(root, "0000:05:00.0", "class") == "0x068000\n"
    assert read(root, "0000:05:00.0", "device") == "0x22a3\n"
    assert os.readlink(root / "sys/bus/pci/devices/0000:05:00.0/driver").endswith("/nvidia")
    assert read(root, "0000:1a:00.0", "vendor") == "0x15b3\n"
    assert read(root, "0000:1a:00.0", "class") == "0x020700\n"
    assert os.readlink(root / "sys/bus/pci/devices/0000:1a:00.0/driver").endswith("/mlx5_core")
    no_ib = staged("h100", ib={"enabled": False})
    assert not (no_ib / "sys/bus/pci/devices/0000:1a:00.0/driver").is_symlink()
    assert not (no_ib / "sys/bus/pci/drivers/mlx5_core").exists()


def test_baseboard_switches_are_not_pci_functions(staged) -> None:
    root = staged("b200")
    assert not (root / "sys/bus/pci/devices/0000:01:00.0").exists()


def test_driver_link_only_while_gpu_surface_is_active(staged) -> None:
    for gpu in ({"enabled": False}, {"state": "failed"}):
        root = staged("h100", gpu=gpu)
        assert (root / "sys/bus/pci/devices" / H100_GPU / "vendor").exists()
        assert not (root / "sys/bus/pci/devices" / H100_GPU / "driver").is_symlink()
        assert not (root / "sys/bus/pci/drivers/nvidia").exists()


def test_pci_failed_reads_all_ones_but_keeps_cached_ids(staged) -> None:
    root = staged("h100", pci={"state": "failed"})
    assert read(root, H100_GPU, "vendor") == "0x10de\n"
    assert (root / "sys/bus/pci/devices" / H100_GPU / "config").read_bytes() == b"\xff" * 4096
    assert read(root, H100_GPU, "current_link_speed") == "Unknown\n"


def test_fallen_off_bus_gpu_reads_all_ones() -> None:
    from mokka_core.model.inputs import Inputs
    from mokka_core.model.resolve import resolve
    from mokka_core.schema.builtin import load_builtin
    from mokka_core.schema.overlays import Override

    override = Override.model_validate({"devices": {"2": {"failure": {"mode": "fallen_off_bus"}}}})
    state = resolve(Inputs(profile=load_builtin("h100"), profile_source="h100.yaml", override=override))
    by_bus = {f.bus_id: f for f in pci_functions(state)}
    assert not by_bus[state.gpus[2].bus_id].responding
    assert by_bus[state.gpus[1].bus_id].responding


def test_gpu_count_and_cpu_count_scale(make_node) -> None:
    state = make_node("gb200", gpus=72, host_cpus="0-143")  # a host with the tray's own CPUs
    functions = pci_functions(state)
    assert sum(f.kind == "gpu" for f in functions) == 72
    assert len({f.iommu_group for f in functions}) == len(functions)
    assert cpu_count(state) >= 72


def test_disabled_surface_stages_nothing(make_node) -> None:
    from mokka_core.stage.surface import StageContext
    from mokka_sim_pci.surface import PciSurface

    assert PciSurface().plan(make_node("h100", pci={"enabled": False}), StageContext(root=Path("/"))) == []


def test_pcie_link_is_the_one_nvml_reports(tmp_path: Path) -> None:
    """A profile without a pcie block, or with only the maximum: lspci and NVML see the same link."""
    from mokka_core.model.spec import NodeSpec
    from mokka_core.schema.builtin import builtin_text
    from mokka_core.stage.nvml_view import render_nvml_state

    line = next(line for line in builtin_text("t4").splitlines(keepends=True) if line.startswith("  pcie:"))
    for name, body in (("no-pcie", builtin_text("t4").replace(line, "")),
                       ("max-only", builtin_text("t4").replace(line, "  pcie: {max_link_gen: 5, max_link_width: 8}\n")),
                       ):
        profile = tmp_path / f"{name}.yaml"
        profile.write_text(body)
        node = NodeSpec(profile_file=profile).resolve()
        link = next(f for f in pci_functions(node) if f.kind == "gpu").function.link
        state = dict(line.split("=", 1) for line in render_nvml_state(node).splitlines() if "=" in line)
        nvml = tuple(int(state[f"device.0.pcie.{k}"]) for k in ("max_gen", "current_gen", "max_width", "current_width"))
        assert nvml == (link.max_gen, link.current_gen, link.max_width, link.current_width), name
    assert nvml == (5, 5, 8, 8)
