"""Under ``mokka run`` the MIG surfaces follow what real nvidia-smi 550 does in CMD; a node boots partitioned."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mokka_core.schema.builtin import builtin_text
from mokka_core.stage.native import native_dir
from mokka_core.testing import consumers

pytestmark = [pytest.mark.consumer,
              pytest.mark.skipif(native_dir() is None, reason="mock libnvidia-ml not built (make -C native install)")]

CAPS = "/proc/driver/nvidia/capabilities/gpu0/mig"


@pytest.fixture(autouse=True)
def real_node(whole_node: None) -> None:
    """The capability files are the gpu surface's: skipped where it is not installed (tox -e e2e runs these)."""
WAIT = "for i in $(seq 50); do {test} && break; sleep 0.1; done"


def mokka_run(script: str, *profile: str) -> str:
    if os.geteuid() != 0 and not consumers.required():
        pytest.skip("mount namespaces need root (CI runs as root)")
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    command = [sys.executable, "-m", "mokka_core", "run", *profile, "--gpus", "2", "--", "sh", "-c", script]
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, env={**os.environ, "PATH": path})
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_partition_made_in_cmd_shows_in_the_capabilities_and_goes() -> None:
    smi = consumers.require("nvidia-smi", version="550")
    out = mokka_run("; ".join([
        f"{smi} -i 0 -mig 1 >/dev/null", f"{smi} mig -i 0 -cgi 9 -C >/dev/null",
        WAIT.format(test=f"[ -e {CAPS}/gi2/ci0/access ]"),  # a lone 3g goes to 4:4, id 2, as on real boards
        f"cat {CAPS}/gi2/access", "ls /dev/nvidia-caps",
        f"{smi} mig -i 0 -dci >/dev/null", f"{smi} mig -i 0 -dgi >/dev/null",
        WAIT.format(test=f"[ ! -e {CAPS}/gi2/access ]"),
        f"echo left: $(find {CAPS} -name access | wc -l) $(ls /dev/nvidia-caps 2>/dev/null | wc -l)",
        "echo dirs: $(ls /proc/driver/nvidia/capabilities)",  # the GPU instance's directories went with it
    ]), "--profile", "h100")
    assert "DeviceFileMinor: 21\nDeviceFileMode: 292\nDeviceFileModify: 1\n" in out, out  # 3 + 9 * gi
    assert "nvidia-cap1\nnvidia-cap2\nnvidia-cap21\nnvidia-cap22\n" in out
    assert "left: 0 0" in out
    assert "dirs: mig\n" in out


def test_a_profile_with_a_layout_boots_partitioned(tmp_path: Path) -> None:
    smi = consumers.require("nvidia-smi", version="550")
    mig_off = "    mode_current: disabled\n    mode_pending: disabled\n"
    profile = tmp_path / "h100-partitioned.yaml"
    profile.write_text(builtin_text("h100").replace(
        mig_off, "    mode_current: enabled\n    mode_pending: enabled\n    layout: [3g.40gb, 3g.40gb]\n"))
    out = mokka_run(f"{smi} -L; ls {CAPS}", "--profile-file", str(profile))
    gpu0 = out.split("GPU 1:")[0]
    assert gpu0.count("MIG 3g.40gb     Device  ") == 2, out
    assert "gi1\ngi2\n" in out
