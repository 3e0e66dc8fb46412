"""The export list: exactly the real 550 names, nothing internal, libc only."""
from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import NATIVE, consumers

EXPORTS_550 = sorted(x for x in (NATIVE / "exports-550.txt").read_text().split() if x)
EXPORTS_535 = sorted(x for x in (NATIVE / "tests" / "exports-535.txt").read_text().split() if x)


def dynsyms(lib: Path, *flags: str) -> list[str]:
    out = subprocess.run(["nm", "-D", *flags, str(lib)], check=True, capture_output=True, text=True).stdout
    return sorted(line.split()[-1] for line in out.splitlines() if line.strip())


def test_exports_match_list(lib_dir: Path) -> None:
    assert dynsyms(lib_dir / "libnvidia-ml.so.1", "--defined-only") == EXPORTS_550


def test_535_names_are_a_subset() -> None:
    assert set(EXPORTS_535) <= set(EXPORTS_550)


def test_only_libc_needed_and_soname(lib_dir: Path) -> None:
    out = subprocess.run(["readelf", "-d", str(lib_dir / "libnvidia-ml.so.1")], capture_output=True, text=True,
                         check=True).stdout
    needed = [line.split("[")[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line]
    assert set(needed) <= {"libc.so.6", "libpthread.so.0", "libdl.so.2"}, needed
    assert "Library soname: [libnvidia-ml.so.1]" in out


def test_chain_of_names(lib_dir: Path) -> None:
    real = lib_dir / "libnvidia-ml.so.1"
    assert real.is_symlink() and (lib_dir / "libnvidia-ml.so").is_symlink()
    assert real.resolve().name.startswith("libnvidia-ml.so.5")


def test_undefined_symbols_are_libc_only(lib_dir: Path) -> None:
    undefined = dynsyms(lib_dir / "libnvidia-ml.so.1", "--undefined-only")
    assert not [s for s in undefined if s.startswith(("nvml", "mk_"))]


def test_same_exports_as_real_550_library() -> None:
    real = consumers.require("libnvidia-ml", version="550")
    assert dynsyms(real, "--defined-only") == EXPORTS_550
