"""Snippet tests for libmokka-preload: one tiny C program per intercepted symbol family.

Each ``snippets/<name>.c`` runs under ``tools/mokka-preload-wrapper`` against a small
hand-made root; its stdout must equal ``snippets/<name>.expected``.  Without the shim
the same programs must see the host instead (the shim, not the program, does the work).
Run: ``pytest native/preload/tests`` (builds the library into a temp dir with gcc).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).parent
SNIPPETS = HERE / "snippets"
NATIVE = HERE.parents[1]
WRAPPER = NATIVE / "tools" / "mokka-preload-wrapper"
DEV = "sys/bus/pci/devices/0000:99:00.0"

#: compiler flags per snippet (default: no fortification, so the plain symbols are called)
FLAGS = {"fortify_open": ["-O2", "-D_FORTIFY_SOURCE=2"]}

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("make") is None,
                                reason="needs gcc and make")


def build_preload(out_dir: Path) -> Path:
    """Build libmokka-preload.so with the project's makefile fragment into ``out_dir``."""
    subprocess.run(["make", "-s", "-C", str(NATIVE), "-f", "preload/preload.mk", "preload",
                    f"PRELOAD_B={out_dir}"], check=True)
    return out_dir / "libmokka-preload.so"


def make_root(root: Path) -> Path:
    """A minimal staged node: one PCI GPU, driver files, module list, one device node."""
    device = root / "sys/devices/pci0000:99/0000:99:00.0"
    device.mkdir(parents=True)
    (device / "vendor").write_text("0x10de\n")
    (device / "device").write_text("0x2330\n")
    (root / "sys/bus/pci/drivers/nvidia").mkdir(parents=True)
    (device / "driver").symlink_to("../../../bus/pci/drivers/nvidia")
    (root / "sys/bus/pci/devices").mkdir(parents=True)
    (root / DEV).symlink_to("../../../devices/pci0000:99/0000:99:00.0")
    (root / "proc/driver/nvidia/gpus").mkdir(parents=True)
    (root / "proc/driver/nvidia/version").write_text("NVRM version: mokka snippet test\n")
    (root / "proc/driver/nvidia/params").write_text("Mobile: 4294967295\n")
    (root / "proc/modules").write_text("nvidia 54341632 0 - Live 0x0000000000000000\n")
    (root / "dev").mkdir()
    (root / "dev/nvidia0").write_text("")
    return root


@pytest.fixture(scope="session")
def preload_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_preload(tmp_path_factory.mktemp("preload"))


@pytest.fixture(scope="session")
def node_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_root(tmp_path_factory.mktemp("node") / "root")


@pytest.fixture(scope="session")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("snippets")
    binaries = {}
    for source in sorted(SNIPPETS.glob("*.c")):
        binary = out / source.stem
        flags = FLAGS.get(source.stem, ["-O1", "-U_FORTIFY_SOURCE"])
        subprocess.run(["gcc", *flags, "-Wall", "-D_GNU_SOURCE", "-o", str(binary), str(source), "-ldl", "-lpthread"],
                       check=True)
        binaries[source.stem] = binary
    return binaries


def run_snippet(binary: Path, lib: Path | None, root: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "MOKKA_ROOT": str(root), **extra}
    argv = [str(binary)]
    if lib is not None:
        env["MOKKA_PRELOAD_LIB"] = str(lib)
        argv = [str(WRAPPER), *argv]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("name", sorted(p.stem for p in SNIPPETS.glob("*.c")))
def test_snippet_sees_the_root(name: str, compiled: dict[str, Path], preload_lib: Path, node_root: Path) -> None:
    done = run_snippet(compiled[name], preload_lib, node_root)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert done.stdout == (SNIPPETS / f"{name}.expected").read_text()


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind not installed (apt-get install valgrind)")
@pytest.mark.parametrize("name", ["open", "readlink", "opendir", "fopen", "stat"])
def test_snippet_under_valgrind(name: str, compiled: dict[str, Path], preload_lib: Path, node_root: Path) -> None:
    """The valgrind mode umockdev has: no invalid access or leak inside the shim."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "MOKKA_ROOT": str(node_root),
           "LD_PRELOAD": str(preload_lib)}
    valgrind = ["valgrind", "-q", "--error-exitcode=99", "--leak-check=full", "--errors-for-leak-kinds=definite"]
    done = subprocess.run([*valgrind, str(compiled[name])], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (SNIPPETS / f"{name}.expected").read_text()


@pytest.mark.parametrize("name", ["open", "opendir", "readlink"])
def test_without_the_shim_the_host_shows(name: str, compiled: dict[str, Path], node_root: Path) -> None:
    done = run_snippet(compiled[name], None, node_root)
    assert done.stdout != (SNIPPETS / f"{name}.expected").read_text()
    assert "0x10de" not in done.stdout


def test_fortified_build_calls_the_open_2_family(compiled: dict[str, Path]) -> None:
    symbols = subprocess.run(["nm", "-D", str(compiled["fortify_open"])], capture_output=True, text=True).stdout
    assert "__open_2" in symbols and "__openat64_2" in symbols


def test_overflow_fails_closed(compiled: dict[str, Path], preload_lib: Path, tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 200)
    while len(str(deep)) < 4000:
        deep = deep / ("d" * 200)
    done = run_snippet(compiled["open"], preload_lib, deep)
    assert "open /sys/bus/pci/devices/0000:99:00.0/vendor: error File name too long" in done.stdout
    # paths outside /sys, /dev and /proc are never touched
    done = run_snippet(compiled["readlink"], preload_lib, deep)
    assert "realpath /etc: /etc" in done.stdout


def test_kill_switch_turns_redirection_off(compiled: dict[str, Path], preload_lib: Path, tmp_path: Path) -> None:
    root = make_root(tmp_path / "root")
    (root / "var/lib/mokka").mkdir(parents=True)
    (root / "var/lib/mokka/preload-disabled").write_text("")
    done = run_snippet(compiled["open"], preload_lib, root)
    assert "0x10de" not in done.stdout
    (root / "var/lib/mokka/preload-disabled").unlink()
    assert "0x10de" in run_snippet(compiled["open"], preload_lib, root).stdout


def test_debug_path_logs_redirections(compiled: dict[str, Path], preload_lib: Path, node_root: Path) -> None:
    done = run_snippet(compiled["fopen"], preload_lib, node_root, MOKKA_DEBUG="path")
    assert f"mokka-preload: path /proc/modules -> {node_root}/proc/modules" in done.stderr


def test_only_the_intended_symbols_are_exported(preload_lib: Path) -> None:
    out = subprocess.run(["nm", "-D", "--defined-only", str(preload_lib)], capture_output=True, text=True,
                         check=True).stdout
    exported = sorted(line.split()[-1] for line in out.splitlines() if line.strip())
    assert exported == (HERE.parent / "exports.txt").read_text().split()


def test_wrapper_refuses_without_root(tmp_path: Path) -> None:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    done = subprocess.run([str(WRAPPER), "true"], env=env, capture_output=True, text=True)
    assert done.returncode == 2 and "MOKKA_ROOT is not set" in done.stderr
    done = subprocess.run([str(WRAPPER), "true"], env={**env, "MOKKA_ROOT": str(tmp_path),
                                                       "MOKKA_PRELOAD_LIB": str(tmp_path / "nope.so")},
                          capture_output=True, text=True)
    assert done.returncode == 127 and "not found" in done.stderr
