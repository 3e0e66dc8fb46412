"""Exports: the real 535/550/555 names, the newest header's and DCGM's functions; nothing internal, libc only."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import NATIVE, consumers, nvml_env

sys.path.insert(0, str(NATIVE / "tools"))
from gen_stubs import header_decls

BRANCHES = ("535", "550", "555")
NOT_SUPPORTED = 3


def names(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


EXPORTS = names(NATIVE / "exports.txt")
REAL = {branch: names(NATIVE / "tests" / f"exports-{branch}.txt") for branch in BRANCHES}


def dynsyms(lib: Path, *flags: str) -> list[str]:
    out = subprocess.run(["nm", "-D", *flags, str(lib)], check=True, capture_output=True, text=True).stdout
    return sorted({line.split()[-1] for line in out.splitlines() if line.strip()})


def test_exports_match_list(lib_dir: Path) -> None:
    assert sorted(EXPORTS) == EXPORTS
    assert dynsyms(lib_dir / "libnvidia-ml.so.1", "--defined-only") == EXPORTS


def test_list_is_the_union_of_the_real_lists_and_the_header(lib_dir: Path) -> None:
    version = re.search(r"nvml\.h (\S+) \(PyPI", (NATIVE / "exports.txt").read_text())
    assert version, "exports.txt names the header it was made from"
    header = NATIVE / "build" / f"nvml-dev-{version[1]}" / "nvml.h"
    subprocess.run(["make", "-s", "-C", str(NATIVE), "header", f"NVML_DEV_VERSION={version[1]}",
                    f"PYTHON={sys.executable}"], check=True)
    declared = set(header_decls(header.read_text()))
    assert len(declared) > 400 and "nvmlDeviceGetDriverModel_v2" in declared
    dcgm = names(NATIVE / "dcgm-nvml-calls.txt")
    assert set(EXPORTS) == declared.union(*REAL.values(), dcgm)


@pytest.mark.parametrize("branch", BRANCHES)
def test_real_list_is_a_subset(branch: str) -> None:
    assert len(REAL[branch]) > 300
    assert set(REAL[branch]) <= set(EXPORTS)


@pytest.mark.parametrize("branch", BRANCHES)
def test_same_exports_as_real_library(branch: str) -> None:
    real = consumers.require("libnvidia-ml", version=branch)
    assert dynsyms(real, "--defined-only") == REAL[branch]


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


STUB_RE = re.compile(r"^MK_API nvmlReturn_t (nvml\w+)\((.*)\)$", re.M)
STUB_CALLS = """
import ctypes, json, sys
L = ctypes.CDLL("libnvidia-ml.so.1")
stubs = json.loads(sys.argv[1])
guard = ctypes.create_string_buffer(b"\\xa5" * 4096, 4096)
for name, arity in stubs.items():
    f = getattr(L, name)
    f.argtypes = [ctypes.c_void_p] * arity
    for arg in (None, 0x10, 0xdeadbeef000, ctypes.addressof(guard)):
        r = f(*[arg] * arity)
        assert r == 3, (name, arg, r)
    assert guard.raw == b"\\xa5" * 4096, name + " wrote through its pointer"
print(len(stubs))
"""


def test_stubs_never_touch_their_arguments(lib_dir: Path) -> None:
    """Every stub (the new names among them) answers NOT_SUPPORTED to NULL, wild and real pointers, writing nothing."""
    stubs = {name: 0 if params.strip() == "void" else params.count(",") + 1
             for name, params in STUB_RE.findall((NATIVE / "build" / "stubs_generated.c").read_text())}
    new = set(EXPORTS).difference(*REAL.values())
    assert len(stubs) > 100 and len(new & set(stubs)) > 50, "the new names are stubs until implemented"
    p = subprocess.run([sys.executable, "-c", STUB_CALLS, json.dumps(stubs)], env=nvml_env(lib_dir, None),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.split() == [str(len(stubs))]
