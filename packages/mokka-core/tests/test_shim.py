"""``mokka shim``: the node through the LD_PRELOAD path shim, without any namespace.

Builds libmokka-preload.so from native/preload with gcc when it is not installed yet.
The symbol-by-symbol snippet tests live in native/preload/tests.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mokka_core.model.spec import NodeSpec
from mokka_core.run import command as run
from mokka_core.testing.consumers import missing

HERE = Path(__file__).parent
REPO = HERE.parents[2]
NATIVE = REPO / "native"
FAKE_NODE = HERE / "fake_node.py"


@pytest.fixture(scope="module")
def preload_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A native directory holding a fresh build of the shim and its wrapper ($MOKKA_NATIVE_DIR)."""
    if not (NATIVE / "preload" / "preload.mk").exists():
        pytest.skip("not in a source checkout (native/preload missing)")
    if shutil.which("gcc") is None or shutil.which("make") is None:
        missing("gcc and make are needed to build the preload shim")
    out = tmp_path_factory.mktemp("native")
    subprocess.run(["make", "-s", "-C", str(NATIVE), "-f", "preload/preload.mk", "preload-install",
                    f"PRELOAD_B={out}/build", f"PRELOAD_INSTALL_DIR={out}"], check=True)
    return out


def lspci() -> str:
    found = shutil.which("lspci")
    if not found and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "-qq", "install", "-y", "--no-install-recommends", "pciutils"],
                       capture_output=True, timeout=900, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        found = shutil.which("lspci")
    if not found:
        missing("lspci not available (apt-get install pciutils)")
    return found


def shim(preload_dir: Path, *args: str, tmpdir: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MOKKA_NATIVE_DIR": str(preload_dir)}
    if tmpdir is not None:
        env["TMPDIR"] = str(tmpdir)
    return subprocess.run([sys.executable, str(FAKE_NODE), "--shim", *args], capture_output=True, text=True,
                          timeout=60, env=env)


GPU_LINE = re.compile(r"^(\S+) 3D controller \[0302\]: NVIDIA Corporation .*\[10de:2330\]", re.M)


def test_lspci_directly_and_through_a_shell_see_the_same_node(preload_dir: Path) -> None:
    lspci()
    direct = shim(preload_dir, "--", "lspci", "-nn")
    via_sh = shim(preload_dir, "--", "sh", "-c", "lspci -nn")
    assert direct.returncode == 0, direct.stderr
    assert len(GPU_LINE.findall(direct.stdout)) == 2
    assert direct.stdout == via_sh.stdout
    # the shim replaces the PCI tree: only the node's devices are listed
    assert all("10de:2330" in line for line in direct.stdout.splitlines())


def test_environment_scrubbing_child_still_sees_the_node(preload_dir: Path) -> None:
    lspci()
    done = shim(preload_dir, "--", "env", "-i", shutil.which("lspci") or "lspci", "-nn")
    assert len(GPU_LINE.findall(done.stdout)) == 2, done.stderr


def test_driver_files_and_kernel_driver_link(preload_dir: Path) -> None:
    lspci()
    done = shim(preload_dir, "--", "sh", "-c", "cat /proc/driver/nvidia/version /proc/modules; lspci -k")
    assert done.returncode == 0, done.stderr
    assert "(mokka test)" in done.stdout
    assert re.search(r"^nvidia 54341632", done.stdout, re.M)
    assert done.stdout.count("Kernel driver in use: nvidia") == 2


def test_disabled_gpu_means_no_driver_files(preload_dir: Path) -> None:
    done = shim(preload_dir, "--disable", "gpu", "--", "sh", "-c", "cat /proc/driver/nvidia/version; ls /dev/nvidia0")
    assert done.returncode != 0
    assert "No such file" in done.stderr


def test_exit_status_and_no_residue(preload_dir: Path, tmp_path: Path) -> None:
    scratch = tmp_path / "tmp"  # a private TMPDIR: other mokka runs on this machine do not interfere
    scratch.mkdir()
    done = shim(preload_dir, "--", "sh", "-c", 'test -d "$MOKKA_ROOT/sys/bus/pci/devices" && exit 5', tmpdir=scratch)
    assert done.returncode == 5
    assert list(scratch.iterdir()) == []


def test_shim_not_built_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MOKKA_NATIVE_DIR", str(tmp_path))
    with pytest.raises(run.MokkaError, match="preload shim is not built"):
        run.run_with_shim(NodeSpec(profile="h100"), ["true"], surfaces={})


def test_installed_wrapper_runs_the_command(preload_dir: Path, tmp_path: Path) -> None:
    wrapper = preload_dir / "mokka-preload-wrapper"
    done = subprocess.run([str(wrapper), "sh", "-c", 'echo "$LD_PRELOAD"'], capture_output=True, text=True,
                          env={"PATH": os.environ["PATH"], "MOKKA_ROOT": str(tmp_path)})
    assert done.stdout.strip() == str(preload_dir / "libmokka-preload.so")


def test_preload_snippet_suite() -> None:
    """The per-symbol snippet tests of native/preload/tests (kept here until the native env runs them)."""
    suite = NATIVE / "preload" / "tests"
    if not suite.is_dir():
        pytest.skip("not in a source checkout (native/preload/tests missing)")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(suite)],
                          capture_output=True, text=True, cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
