"""Real tools against staged roots: lsmod (private mount namespace) and ls on the device nodes."""

from __future__ import annotations

import os
import subprocess

import pytest

pytestmark = [pytest.mark.consumer, pytest.mark.root]


def test_lsmod_lists_the_nvidia_modules(staged, lsmod) -> None:
    out = lsmod(staged("h100"))
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()[1:]}
    assert rows["nvidia_drm"] == ["122880", "0"]
    assert rows["nvidia_modeset"] == ["1458176", "1", "nvidia_drm"]
    assert rows["nvidia_uvm"][1] == "0"
    size, used, holders = rows["nvidia"]
    assert int(size) > 10_000_000
    assert used == "12" and sorted(holders.split(",")) == ["nvidia_modeset", "nvidia_peermem", "nvidia_uvm"]
    # the HCAs' InfiniBand stack, and GPUDirect RDMA's nvidia_peermem on it (h100's system.gpudirect.rdma)
    assert rows["nvidia_peermem"] == ["16384", "0"]
    assert rows["ib_core"][1] == "3"
    assert sorted(rows["ib_core"][2].split(",")) == ["ib_uverbs", "mlx5_ib", "nvidia_peermem"]
    assert rows["mlx5_core"][1:] == ["1", "mlx5_ib"] and rows["mlx5_ib"][1] == "0"
    assert "mlx5_core" not in lsmod(staged("l40s"))  # a node without HCAs


def test_failed_gpu_has_no_modules(staged, lsmod) -> None:
    out = lsmod(staged("h100", gpu={"state": "failed"}))
    assert "nvidia" not in out and "mlx5_core" in out


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root; unprivileged staging writes empty files")
def test_ls_shows_the_character_devices(staged) -> None:
    root = staged("a100", gpus=2)
    out = subprocess.run(f"ls -l {root}/dev/nvidia*", shell=True, capture_output=True, text=True, check=True).stdout
    lines = {line.split()[-1].rsplit("/", 1)[-1]: line for line in out.splitlines()}
    assert set(lines) == {"nvidia0", "nvidia1", "nvidiactl", "nvidia-modeset", "nvidia-uvm", "nvidia-uvm-tools"}
    assert lines["nvidiactl"].startswith("crw-rw-rw-") and " 195, 255 " in lines["nvidiactl"]
    assert " 509,   1 " in lines["nvidia-uvm-tools"]


def test_modinfo_reads_the_installed_modules(staged, modinfo_bin) -> None:
    for state in ("healthy", "failed"):  # a module that failed to load is still installed
        root = staged("h100", gpu={"state": state})
        out = subprocess.run([str(modinfo_bin), "-b", str(root), "nvidia"], capture_output=True, text=True,
                             check=True).stdout
        fields = [line.split(":", 1) for line in out.splitlines()]
        assert ["version", " " * 8 + "550.163.01"] in fields
        assert "alias:          pci:v000010DEd*sv*sd*bc03sc02i00*" in out
        assert "parm:           NVreg_EnableGpuFirmware:uint" in out
        drm = subprocess.run([str(modinfo_bin), "-b", str(root), "-F", "depends", "nvidia-drm"],
                             capture_output=True, text=True, check=True).stdout
        assert drm.strip() == "nvidia-modeset,nvidia"


def test_modalias_resolves_to_nvidia(staged, modinfo_bin) -> None:
    """What lspci -k's "Kernel modules:" and udev's coldplug ask: which module serves this device?"""
    modprobe = modinfo_bin.with_name("modprobe")
    root = staged("h100")
    for alias in ("pci:v000010DEd00002330sv000010DEsd000016C1bc03sc02i00", "char-major-195-255"):
        out = subprocess.run([str(modprobe), "-d", str(root), "-R", alias], capture_output=True, text=True)
        assert out.stdout.split() == ["nvidia"], out.stderr


def test_module_index_is_complete_and_keeps_the_hosts_modules(tmp_path, make_node, modinfo_bin,
                                                             nvidia_smi_cache) -> None:
    """The index libkmod needs whole (lspci -k warns "Unable to load libkmod resources" otherwise), with a
    host's own modules merged in; real depmod, run over the same module files, is the oracle."""
    from mokka_core.stage.staging import stage_wave
    from mokka_sim_gpu.kernel_objects import elf_object, kernel_object_entries

    depmod = modinfo_bin.with_name("depmod")
    modprobe = modinfo_bin.with_name("modprobe")
    release = "6.1.0-mokka-test"
    host = tmp_path / "host"
    fake = host / "lib/modules" / release / "kernel/fs/fakefs/fakefs.ko"
    fake.parent.mkdir(parents=True)
    fake.write_bytes(elf_object([("alias", "fs-fakefs"), ("alias", "devname:fake-ctl"), ("depends", ""),
                                 ("name", "fakefs"), ("vermagic", f"{release} SMP mod_unload ")], "x86_64"))
    subprocess.run([str(depmod), "-b", str(host), release], check=True, capture_output=True)
    root = tmp_path / "root"
    entries = kernel_object_entries(make_node("h100"), release, "x86_64", host_modules=host / "lib/modules" / release)
    stage_wave({"gpu": entries}, root)
    index = root / "lib/modules" / release
    again = kernel_object_entries(make_node("h100"), release, "x86_64", host_modules=host / "lib/modules" / release)
    as_bytes = [(e.path, e.content.encode() if isinstance(e.content, str) else e.content) for e in entries]
    assert [(e.path, e.content) for e in again] == as_bytes  # the second one from Mokka's cache
    assert len(list((nvidia_smi_cache.parent / "module-index").iterdir())) == 1
    for name in ("modules.dep", "modules.alias", "modules.symbols", "modules.builtin", "modules.builtin.alias"):
        assert (index / f"{name}.bin").is_file(), name
    for alias, module in (("fs-fakefs", "fakefs"), ("pci:v000010DEd00002330sv000010DEsd000016C1bc03sc02i00",
                                                     "nvidia"), ("char-major-195-0", "nvidia")):
        out = subprocess.run([str(modprobe), "-d", str(root), "-S", release, "-R", alias], capture_output=True,
                             text=True)
        assert out.stdout.split() == [module], (alias, out.stderr)
    # what depmod itself writes for the host's module plus ours (it takes dependencies from symbol
    # tables, which our objects do not carry, so modules.dep is compared by the modules it lists)
    union = tmp_path / "union"
    union.mkdir()
    for tree in (host, root):
        subprocess.run(["cp", "-a", f"{tree}/lib", str(union)], check=True)
    subprocess.run([str(depmod), "-b", str(union), release], check=True, capture_output=True)
    real = union / "lib/modules" / release
    for name in ("modules.dep", "modules.alias", "modules.symbols", "modules.builtin", "modules.devname"):
        lines = [(line.split(":")[0] if name == "modules.dep" else line)
                 for line in (real / name).read_text().splitlines() if not line.startswith("#")]
        ours = [(line.split(":")[0] if name == "modules.dep" else line)
                for line in (index / name).read_text().splitlines() if not line.startswith("#")]
        assert sorted(ours) == sorted(lines), name
