"""The shim exports exactly the names it interposes, nothing internal."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mokka_sim_ib.testing import stage_node

MAP = Path(__file__).resolve().parents[1] / "native/src/mokka-ib.map"


def test_exports_match_the_version_script(shim_built: Path) -> None:
    if shutil.which("nm") is None:
        pytest.skip("nm not installed")
    global_block = MAP.read_text().split("global:")[1].split("local:")[0]
    allowed = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", re.sub(r"/\*.*?\*/", "", global_block, flags=re.S)))
    listing = subprocess.run(["nm", "-D", "--defined-only", str(shim_built)], capture_output=True, text=True,
                             check=True).stdout
    exported = {line.split()[-1].split("@")[0] for line in listing.splitlines() if line.strip()}
    assert exported <= allowed, f"unexpected exports: {sorted(exported - allowed)}"
    assert {"open", "openat", "ioctl", "socket"} <= exported


def kernfs_name_hash(name: str) -> int:
    """fs/kernfs/dir.c kernfs_name_hash (no namespace) on a 64-bit kernel: include/linux/stringhash.h's
    partial_name_hash and end_name_hash (hash_64 with GOLDEN_RATIO_64, 32 bits)."""
    value = 0
    for byte in name.encode():
        value = ((value + (byte << 4) + (byte >> 60)) * 11) & (2**64 - 1)
    value = (((value * 0x61C8864680B583EB) & (2**64 - 1)) >> 32) & 0x7FFFFFFF
    return min(value + 2 if value < 2 else value, 0x7FFFFFFF - 1)


def test_the_rdma_class_directories_list_in_the_kernels_order(shim_built: Path, tmp_path: Path) -> None:
    """sysfs lists a directory by kernfs name hash (mlx5_0 first for any HCA count), and libibumad's default port is
    the first active CA listed: through the shim a staged directory lists the same way, whatever its filesystem."""
    node = stage_node(tmp_path / "n", "gpu-node-1", gpus=8)
    script = "import os, sys; print(' '.join(os.listdir(sys.argv[1])))"
    for cls in ("infiniband", "infiniband_mad"):
        directory = node.root / "sys/class" / cls
        listed = subprocess.run([sys.executable, "-c", script, str(directory)], capture_output=True, text=True,
                                check=True, env={**os.environ, "LD_PRELOAD": str(shim_built)}).stdout.split()
        assert listed == sorted(os.listdir(directory), key=lambda name: (kernfs_name_hash(name), name))
        if cls == "infiniband":
            assert listed[0] == "mlx5_0"
