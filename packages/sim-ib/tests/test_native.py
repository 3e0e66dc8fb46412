"""The shim exports exactly the names it interposes, nothing internal."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

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
