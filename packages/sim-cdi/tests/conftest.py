"""Fixtures for the consumer tests: Debian's CDI Go package built into a checker, runc and busybox."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from mokka_core.testing import consumers
from mokka_core.testing.consumers import missing

CHECKER_SOURCE = Path(__file__).parent / "cdi_check" / "main.go"
GO_CDI_PACKAGE = "golang-github-container-orchestrated-devices-container-device-interface-dev"
GO_CDI_SOURCE = Path("/usr/share/gocode/src/github.com/container-orchestrated-devices/container-device-interface")


@pytest.fixture(scope="session")
def cdi_check() -> Path:
    """The checker binary, built offline against Debian's CDI package; cached by source hash."""
    present = bool(shutil.which("go")) and GO_CDI_SOURCE.is_dir()
    return consumers.go_program(CHECKER_SOURCE, "cdi-check", [GO_CDI_PACKAGE], present)


@pytest.fixture(scope="session")
def runc() -> Path:
    if os.geteuid() != 0:
        missing("runc containers need root here")
    present = bool(shutil.which("runc")) and Path("/bin/busybox").exists()
    consumers.ensure_apt(["runc", "busybox-static"], present=present)
    found = shutil.which("runc")
    if not found:
        missing("runc not found after installing it")
    return Path(found)


#: the setter record of an H100 partitioned as `nvidia-smi mig -cgi 9,19 -C` leaves it on GPU 0
#: (GI 1: 3g.40gb at 0, GI 7: 1g.10gb at 4, each with its whole-instance compute instance 0)
PARTITIONED = ("mokka-nvml-settings 1\ndevice.0.mig.current=1\ndevice.0.mig.gpu_instances=1,4,0,7,0,4\n"
               "device.0.mig.compute_instances=1,0,2,0,7,0,0,0\nend\n")


@pytest.fixture
def h100_partition():
    """GPU 0's partition as ``StageContext.mig`` carries it."""
    from mokka_core.stage import mig_partition, nvml_settings

    return mig_partition.decode(nvml_settings.parse(PARTITIONED, Path("record")), Path("record"))
