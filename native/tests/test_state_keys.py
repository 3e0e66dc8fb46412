"""The state-file key table (native/state-keys.toml) and what is generated from it."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import NATIVE, ROOT
from mkstate import make_state, nvml_key_lookup

GENERATOR = NATIVE / "tools" / "gen_state_keys.py"
OUTPUTS = ["native/src/state_keys.inc", "packages/mokka-core/src/mokka_core/stage/nvml_keys.py", "native/README.md"]


def test_committed_outputs_are_generated_from_the_table(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(GENERATOR), "--out-dir", str(tmp_path)], check=True, timeout=60)
    stale = [rel for rel in OUTPUTS if (tmp_path / rel).read_text() != (ROOT / rel).read_text()]
    assert not stale, (f"{', '.join(stale)} differ from what native/state-keys.toml generates: "
                       "run `make -C native keys` and commit the result")


@pytest.mark.parametrize(("row", "message"), [
    ('key = "x"\ntype = "u16"\nfield = "x"\ndoc = "d"', "type 'u16'"),
    ('key = "x.<a>"\ntype = "u32"\nfield = "x"\ndoc = "d"\nexpand.a = ["p", "q"]', "does not use <a>"),
    ('key = "x.<a>"\ntype = "u32"\nfield = "x[<a>]"\ndoc = "d"', "placeholders"),
    ('key = "X"\ntype = "u32"\nfield = "x"\ndoc = "d"', "character"),
    ('key = "name"\ntype = "str"\nfield = "name"\ndoc = "d"', "twice"),
    ('key = "y"\ntype = "u8list"\nfield = "y"\ndoc = "d"', "count"),
])
def test_generator_rejects_a_bad_row(tmp_path: Path, row: str, message: str) -> None:
    for rel in ("native/src/mokka.h", "native/README.md"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text((ROOT / rel).read_text())
    table = (NATIVE / "state-keys.toml").read_text() + f"\n[[device]]\n{row}\n"
    (tmp_path / "native" / "state-keys.toml").write_text(table)
    p = subprocess.run([sys.executable, str(GENERATOR), "--root", str(tmp_path), "--out-dir", str(tmp_path / "out")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and message in p.stderr, p.stderr
    assert not (tmp_path / "out").exists()


def test_test_states_and_fuzz_dictionary_use_table_keys() -> None:
    for shape in ("h100", "a100", "t4"):
        unknown = [line.partition("=")[0] for line in make_state(shape).splitlines()[1:-1]
                   if not nvml_key_lookup.is_known_key(line.partition("=")[0])]
        assert not unknown, f"{shape}: {unknown}"
    tokens = [line.strip().strip('"') for line in (NATIVE / "fuzz" / "state.dict").read_text().splitlines()]
    keys = [token[:-1] for token in tokens if len(token) > 1 and token.endswith("=")]
    assert keys
    for key in keys:  # a full key, or one relative to device 0
        assert nvml_key_lookup.is_known_key(key) or nvml_key_lookup.is_known_key(f"device.0.{key}"), key
