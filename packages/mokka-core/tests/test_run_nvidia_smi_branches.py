"""Real nvidia-smi of every Debian branch (535, 550, 555) in ``mokka run --profile h100``: every mode, no broken output.

nvidia-smi 555 calls functions 550 lacks (``nvmlDeviceGetDriverModel_v2``, export-table slot 251 for ``-pm``);
a missing one shows as "Function Not Found" or "Unknown Error" in its output.  Needs root (mount
namespaces) and the installed gpu and pci surfaces; the tools are fetched by the test.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys

import pytest

from mokka_core.testing import consumers
from mokka_core.testing.consumers import required

pytestmark = pytest.mark.consumer

MODES = {
    "default": "",
    "list": "-L",
    "query": "-q",
    "xml": "-q -x",
    "csv": "--query-gpu=name,memory.total --format=csv",
    "topo": "topo -m",
    "nvlink": "nvlink -s",
    "dmon": "dmon -c 1",
    "pmon": "pmon -c 1",
}
BAD = ("Function Not Found", "Unknown Error", "Uninitialized", "Segmentation fault", "core dumped")
H100_GPUS = 8


@pytest.fixture(autouse=True)
def real_node() -> None:
    from mokka_core.stage.surface import discover

    if os.geteuid() != 0 and not required():
        pytest.skip("mount namespaces need root (CI runs as root)")
    if not {"gpu", "pci"} <= set(discover()):
        reason = "mokka-sim-gpu and mokka-sim-pci are not installed in this environment"
        pytest.fail(reason) if os.environ.get("MOKKA_E2E") == "1" else pytest.skip(reason)


@functools.cache
def every_mode(branch: str) -> dict[str, tuple[int, str]]:
    """One ``mokka run`` per branch runs every mode; each mode's exit status and output."""
    smi = consumers.require("nvidia-smi", version=branch)
    script = "".join(f'echo "@@ {name}"; {smi} {args} 2>&1; echo "@@ rc $?"\n' for name, args in MODES.items())
    done = subprocess.run([sys.executable, "-m", "mokka_core", "run", "--profile", "h100", "--", "sh", "-c", script],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    blocks = re.findall(r"^@@ (\w+)\n(.*?)^@@ rc (\d+)$", done.stdout, re.M | re.S)
    assert [name for name, _, _ in blocks] == list(MODES), done.stdout
    return {name: (int(rc), out) for name, out, rc in blocks}


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("branch", ["535", "550", "555"])
def test_every_mode_prints_no_broken_output(branch: str, mode: str) -> None:
    rc, out = every_mode(branch)[mode]
    assert rc == 0, out
    for bad in BAD:
        assert bad not in out, f"{bad!r} in nvidia-smi {branch} {MODES[mode]}:\n{out}"
    if mode == "list":
        assert out.count("NVIDIA H100 80GB HBM3") == H100_GPUS, out
    if mode == "csv":
        assert out.splitlines()[1:] == ["NVIDIA H100 80GB HBM3, 81559 MiB"] * H100_GPUS, out
    if mode == "query":
        assert "Driver Model\n        Current                           : N/A" in out
