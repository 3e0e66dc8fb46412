"""Real nvidia-smi of every Debian branch (535, 550, 555) in ``mokka run``: every mode, no broken output.

nvidia-smi 555 runs every mode on the seven profiles with a real capture, 535 and 550 on h100 (one ``mokka run`` per
branch and board, every mode in one shell). The product names and framebuffer totals are those of the real
captures (``reference/captures/qx-<profile>.xml``: ``product_name``, ``fb_memory_usage/total``).

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

#: a wide --query-gpu list: identity, PCIe, modes, clocks, power, ECC, memory, MIG and fabric fields
WIDE_FIELDS = ("timestamp", "driver_version", "count", "name", "serial", "uuid", "pci.bus_id", "pci.device_id",
               "pci.sub_device_id", "pcie.link.gen.current", "pcie.link.gen.max", "pcie.link.width.current",
               "pcie.link.width.max", "index", "display_mode", "persistence_mode", "addressing_mode",
               "accounting.mode", "driver_model.current", "vbios_version", "inforom.img", "inforom.oem",
               "reset_status.reset_required", "gom.current", "fan.speed", "pstate", "clocks_event_reasons.active",
               "clocks_event_reasons.sw_thermal_slowdown", "memory.total", "memory.reserved", "memory.used",
               "memory.free", "compute_mode", "compute_cap", "utilization.gpu", "utilization.memory",
               "utilization.encoder", "utilization.jpeg", "encoder.stats.sessionCount", "ecc.mode.current",
               "ecc.errors.corrected.volatile.total", "ecc.errors.uncorrected.aggregate.total",
               "retired_pages.pending", "temperature.gpu", "temperature.memory", "power.management", "power.draw",
               "power.draw.instant", "power.limit", "enforced.power.limit", "power.default_limit", "power.min_limit",
               "power.max_limit", "clocks.current.graphics", "clocks.current.sm", "clocks.current.memory",
               "clocks.applications.graphics", "clocks.max.graphics", "clocks.max.memory", "mig.mode.current",
               "protected_memory.total", "fabric.state", "fabric.status")
MODES = {
    "default": "",
    "list": "-L",
    "query": "-q",
    "xml": "-q -x",
    "csv": "--query-gpu=name,memory.total --format=csv",
    "wide": "--query-gpu=" + ",".join(WIDE_FIELDS) + " --format=csv",
    "topo": "topo -m",
    "nvlink": "nvlink -s",
    "dmon": "dmon -c 1",
    "gpm": "dmon --gpm-metrics 2,10,20 -c 3 -i 0",  # GPM needs two samples: the first line shows "-"
    "pmon": "pmon -c 1",
}
BAD = ("Function Not Found", "Unknown Error", "Uninitialized", "Segmentation fault", "core dumped")
#: product name, framebuffer MiB and GPU count of each board (the captures; GPU counts of the profiles' nodes)
BOARDS = {
    "a100": ("NVIDIA A100-SXM4-40GB", 40960, 8),
    "b200": ("NVIDIA B200", 183359, 8),
    "gb200": ("NVIDIA GB200", 189471, 4),
    "gb300": ("NVIDIA GB300", 284208, 4),
    "h100": ("NVIDIA H100 80GB HBM3", 81559, 8),
    "l40s": ("NVIDIA L40S", 46068, 8),
    "t4": ("Tesla T4", 15360, 1),
    # boards without a capture: their profiles' values (public NVIDIA specifications, cited there)
    "h200": ("NVIDIA H200", 143771, 8),
    "l4": ("NVIDIA L4", 23034, 1),
    "a10g": ("NVIDIA A10G", 23028, 1),
}
#: (branch, profile): 555 on every board, the older branches on h100
RUNS = [("555", profile) for profile in BOARDS] + [("535", "h100"), ("550", "h100")]


@pytest.fixture(autouse=True)
def real_node() -> None:
    from mokka_core.stage.surface import discover

    if os.geteuid() != 0 and not required():
        pytest.skip("mount namespaces need root (CI runs as root)")
    if not {"gpu", "pci"} <= set(discover()):
        reason = "mokka-sim-gpu and mokka-sim-pci are not installed in this environment"
        pytest.fail(reason) if os.environ.get("MOKKA_E2E") == "1" else pytest.skip(reason)


@functools.cache
def every_mode(branch: str, profile: str) -> dict[str, tuple[int, str]]:
    """One ``mokka run`` per branch and board runs every mode; each mode's exit status and output."""
    smi = consumers.require("nvidia-smi", version=branch)
    script = "".join(f'echo "@@ {name}"; {smi} {args} 2>&1; echo "@@ rc $?"\n' for name, args in MODES.items())
    done = subprocess.run([sys.executable, "-m", "mokka_core", "run", "--profile", profile, "--", "sh", "-c", script],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    blocks = re.findall(r"^@@ (\w+)\n(.*?)^@@ rc (\d+)$", done.stdout, re.M | re.S)
    assert [name for name, _, _ in blocks] == list(MODES), done.stdout
    return {name: (int(rc), out) for name, out, rc in blocks}


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize(("branch", "profile"), RUNS)
def test_every_mode_prints_no_broken_output(branch: str, profile: str, mode: str) -> None:
    name, fb_mib, gpus = BOARDS[profile]
    rc, out = every_mode(branch, profile)[mode]
    assert rc == 0, out
    for bad in BAD:
        assert bad not in out, f"{bad!r} in nvidia-smi {branch} {MODES[mode]} on {profile}:\n{out}"
    if mode == "list":
        assert out.count(name) == gpus, out
    if mode == "csv":
        assert out.splitlines()[1:] == [f"{name}, {fb_mib} MiB"] * gpus, out
    if mode == "wide":
        rows = out.splitlines()[1:]
        assert len(rows) == gpus and all(row.count(", ") == len(WIDE_FIELDS) - 1 for row in rows), out
    if mode == "query":
        assert "Driver Model\n        Current                           : N/A" in out
    if mode == "gpm":  # Hopper and later answer the GPM API: SM %, DRAM bandwidth %, PCIe TX 2048 MiB/s
        hopper = profile in ("h100", "h200", "b200", "gb200", "gb300")
        assert out.splitlines()[-1].split()[-3:] == (["0", "0", "2048"] if hopper else ["-", "-", "-"]), out
