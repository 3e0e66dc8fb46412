"""Smoke runs of the libFuzzer harnesses (the fixed-budget run is `make -C native fuzz` / tox -e fuzz)."""
from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import NATIVE, consumers


@pytest.mark.parametrize(("harness", "dictionary", "corpus", "max_len"), [
    ("fuzz_state", "state.dict", "corpus", 65536),                  # the state file
    ("fuzz_settings", "settings.dict", "corpus-settings", 4096),     # the setter record and its MIG partition
])
def test_fuzz_harness_smoke(tmp_path, harness, dictionary, corpus, max_len):
    consumers.require("clang")
    subprocess.run(["make", "-s", "-C", str(NATIVE), f"build/{harness}", f"PYTHON={sys.executable}"], check=True,
                   capture_output=True)
    p = subprocess.run([str(NATIVE / "build" / harness), "-max_total_time=3", f"-max_len={max_len}",
                        f"-dict={NATIVE / 'fuzz' / dictionary}", str(tmp_path), str(NATIVE / "fuzz" / corpus)],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-4000:]
