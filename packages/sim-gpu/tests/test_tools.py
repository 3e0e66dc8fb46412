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
    assert used == "11" and sorted(holders.split(",")) == ["nvidia_modeset", "nvidia_uvm"]


def test_failed_gpu_has_no_modules(staged, lsmod) -> None:
    out = lsmod(staged("h100", gpu={"state": "failed"}))
    assert "nvidia" not in out


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
