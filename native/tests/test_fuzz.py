"""Smoke run of the libFuzzer harness (the fixed-budget run is `make -C native fuzz` / tox -e fuzz)."""
from __future__ import annotations

import subprocess
import sys

from conftest import NATIVE, consumers


def test_fuzz_harness_smoke(tmp_path):
    consumers.require("clang")
    subprocess.run(["make", "-s", "-C", str(NATIVE), "build/fuzz_state", f"PYTHON={sys.executable}"], check=True,
                   capture_output=True)
    p = subprocess.run([str(NATIVE / "build" / "fuzz_state"), "-max_total_time=3", "-max_len=65536",
                        f"-dict={NATIVE / 'fuzz' / 'state.dict'}", str(tmp_path), str(NATIVE / "fuzz" / "corpus")],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-4000:]
