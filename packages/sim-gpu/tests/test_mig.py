"""MIG capabilities follow the partition: made with nvml-mock-ctl or real nvidia-smi, gone when destroyed.

Expected formats and minors are the driver's (open-gpu-kernel-modules ``nv-caps.c``: the tables, the
``mig-minors`` and capability-file printers) and what NVIDIA's own tools document: k8s-dra-driver's
comment lists ``gpu3/gi3/ci3/access 439`` and ``gpu6/gi11/ci7/access 920``; a real MIG node's
capability file reads ``DeviceFileMinor: 12`` / ``DeviceFileMode: 292`` / ``DeviceFileModify: 1``
for ``gpu0/mig/gi1/access``.
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from mokka_core.ctl.cli import execute
from mokka_core.model.spec import NodeSpec
from mokka_core.node.settings import NodeSettings
from mokka_core.stage import nodefile, staging
from mokka_core.stage.native import native_dir
from mokka_core.stage.paths import LIB_DIR
from mokka_core.stage.procdevices import host_majors
from mokka_core.testing import consumers
from mokka_core.testing.runner import DaemonRunner
from mokka_core.testing.tree import tree_snapshot
from mokka_core.testing.waiting import wait_for
from mokka_sim_gpu.surface import GpuSurface

CAPS = "proc/driver/nvidia/capabilities"


def test_mig_minors_lists_every_capability_with_the_drivers_minors(staged) -> None:
    lines = (staged("h100") / "proc/driver/nvidia-caps/mig-minors").read_text().splitlines()
    assert lines[:4] == ["config 1", "monitor 2", "gpu0/gi0/access 3", "gpu0/gi0/ci0/access 4"]
    minors = dict(line.rsplit(" ", 1) for line in lines)
    assert minors["gpu0/gi1/access"] == "12"
    assert minors["gpu0/gi1/ci0/access"] == "13"
    assert minors["gpu0/gi2/access"] == "21"
    assert minors["gpu3/gi3/ci3/access"] == "439"
    assert minors["gpu6/gi11/ci7/access"] == "920"
    assert lines[-1] == "gpu31/gi14/ci7/access 4322"
    assert len(lines) == 2 + 32 * 15 * 9


def test_a_board_with_mig_has_config_and_monitor_but_no_nodes_until_partitioned(staged) -> None:
    root = staged("h100")
    assert (root / CAPS / "mig/config").read_text() == "DeviceFileMinor: 1\nDeviceFileMode: 256\nDeviceFileModify: 1\n"
    assert (root / CAPS / "mig/monitor").read_text() == "DeviceFileMinor: 2\nDeviceFileMode: 292\nDeviceFileModify: 1\n"
    assert not (root / CAPS / "gpu0").exists()
    assert not (root / "dev/nvidia-caps").exists()
    assert not (staged("l40s") / CAPS).exists()  # no MIG on the board: only the static minors table


needs_library = pytest.mark.skipif(native_dir() is None, reason="mock libnvidia-ml not built (make -C native install)")


@pytest.fixture
def node(tmp_path: Path):
    root = tmp_path / "root"
    nodefile.save(root, NodeSpec(profile="h100", gpus=2))
    surfaces = {"gpu": GpuSurface()}

    def ctl(*argv: str) -> int:
        return execute(["--root", str(root), *argv], surfaces=surfaces)

    assert ctl("temp", "0", "30") == 0  # stages the node
    yield root, ctl
    staging.teardown_all(root)


#: what a listing shows while the daemon removes what it lists: the partition is still changing
CHANGING = "(changing)"


def capability_files(root: Path) -> list[str]:
    try:
        return sorted(str(p.relative_to(root / CAPS)) for p in (root / CAPS).glob("gpu*/mig/**/access"))
    except FileNotFoundError:
        return [CHANGING]


def cap_nodes(root: Path) -> dict[str, tuple[int, int]]:
    out = {}
    try:
        for path in (root / "dev/nvidia-caps").glob("nvidia-cap*") if (root / "dev/nvidia-caps").is_dir() else ():
            st = path.lstat()
            assert stat.S_ISCHR(st.st_mode) or stat.S_ISREG(st.st_mode)
            out[path.name] = (os.major(st.st_rdev), os.minor(st.st_rdev)) if stat.S_ISCHR(st.st_mode) else (0, 0)
    except FileNotFoundError:
        return {CHANGING: (0, 0)}
    return out


@needs_library
def test_ctl_partition_appears_in_every_capability_and_goes_with_it(node) -> None:
    root, ctl = node
    assert ctl("mig", "0", "on") == 0
    assert ctl("mig", "0", "create", "3g.40gb,1g.10gb") == 0  # GI 2 at 4, GI 7 at 0 (the driver's ids)
    assert capability_files(root) == ["gpu0/mig/gi2/access", "gpu0/mig/gi2/ci0/access",
                                      "gpu0/mig/gi7/access", "gpu0/mig/gi7/ci0/access"]
    assert (root / CAPS / "gpu0/mig/gi7/ci0/access").read_text() == \
        "DeviceFileMinor: 67\nDeviceFileMode: 292\nDeviceFileModify: 1\n"
    nodes = cap_nodes(root)
    assert sorted(nodes) == sorted(f"nvidia-cap{m}" for m in (1, 2, 21, 22, 66, 67))
    if os.geteuid() == 0:
        assert nodes["nvidia-cap66"] == (host_majors().caps, 66)
    assert ctl("mig", "0", "create", "4g.40gb") == 1  # over capacity: refused, nothing changes
    assert len(capability_files(root)) == 4
    assert ctl("mig", "0", "destroy", "2") == 0
    assert capability_files(root) == ["gpu0/mig/gi7/access", "gpu0/mig/gi7/ci0/access"]
    assert ctl("reset") == 0  # clears what NVML set, the partition with it
    assert capability_files(root) == []
    assert cap_nodes(root) == {}


@needs_library
def test_destroyed_instances_leave_the_tree_as_it_was_unpartitioned(node) -> None:
    root, ctl = node
    assert ctl("mig", "0", "on") == 0 and ctl("mig", "1", "on") == 0
    unpartitioned = tree_snapshot(root)
    assert ctl("mig", "0", "create", "3g.40gb,1g.10gb,1g.10gb") == 0
    assert ctl("mig", "1", "create", "7g.80gb") == 0
    assert (root / CAPS / "gpu1/mig/gi0/ci0").is_dir() and (root / "dev/nvidia-caps").is_dir()
    assert ctl("mig", "0", "destroy", "all") == 0
    assert ctl("mig", "1", "destroy", "0") == 0
    assert not (root / CAPS / "gpu0").exists() and not (root / CAPS / "gpu1").exists()
    assert tree_snapshot(root) == unpartitioned


@needs_library
def test_ctl_mig_refuses_what_the_library_refuses(node, capsys) -> None:
    root, ctl = node
    assert ctl("mig", "1", "create", "3g.40gb") == 1
    assert "Invalid state" in capsys.readouterr().err  # MIG is off
    assert ctl("mig", "1", "on") == 0
    assert ctl("mig", "1", "create", "5g.50gb") == 1
    assert "has no GPU-instance profile '5g.50gb'" in capsys.readouterr().err
    assert ctl("mig", "1", "create", "3g.40gb,3g.40gb,1g.10gb") == 1  # the third does not fit: none is made
    assert "Insufficient Resources" in capsys.readouterr().err
    assert ctl("mig", "1", "list") == 0
    assert capsys.readouterr().out.strip() == "GPU 1: no GPU instances"
    assert ctl("mig", "1", "destroy", "5") == 1
    assert ctl("mig", "1", "create", "7g.80gb", "--no-ci") == 0
    assert capability_files(root) == ["gpu1/mig/gi0/access"]
    assert ctl("mig", "1", "off") == 1  # a GPU instance exists: In use, as on a real board
    assert "In use" in capsys.readouterr().err


@needs_library
@pytest.mark.consumer
def test_nvidia_smi_partition_is_followed_by_the_node_daemon(tmp_path: Path) -> None:
    smi = consumers.require("nvidia-smi", version="550")
    root = tmp_path / "root"
    settings = NodeSettings(root=root, spec=NodeSpec(profile="h100", gpus=2), supervise=False, poll_s=0.5)
    with DaemonRunner(settings, surfaces={"gpu": GpuSurface()}):
        env = {**os.environ, "LD_LIBRARY_PATH": str(root / LIB_DIR)}

        def run(*args: str) -> str:
            done = subprocess.run([str(smi), *args], env=env, capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stdout + done.stderr
            return done.stdout

        run("-i", "0", "-mig", "1")
        run("mig", "-i", "0", "-cgi", "9,19", "-C")
        wait_for(lambda: capability_files(root) == ["gpu0/mig/gi2/access", "gpu0/mig/gi2/ci0/access",
                                                   "gpu0/mig/gi7/access", "gpu0/mig/gi7/ci0/access"])
        run("mig", "-i", "0", "-dci")
        wait_for(lambda: capability_files(root) == ["gpu0/mig/gi2/access", "gpu0/mig/gi7/access"])
        run("mig", "-i", "0", "-dgi")
        wait_for(lambda: capability_files(root) == [] and cap_nodes(root) == {})
    assert not root.exists() or not any(root.rglob("*access"))  # teardown leaves no capability behind


def h100_booting(tmp_path: Path, layout: str) -> Path:
    from mokka_core.schema.builtin import builtin_text

    text = builtin_text("h100")
    mig_off = "    mode_current: disabled\n    mode_pending: disabled\n"
    assert mig_off in text
    path = tmp_path / "h100-partitioned.yaml"
    mig_on = f"    mode_current: enabled\n    mode_pending: enabled\n    layout: [{layout}]\n"
    path.write_text(text.replace(mig_off, mig_on))
    return path


@needs_library
def test_a_node_boots_with_its_layout_and_reset_brings_it_back(tmp_path: Path, capsys) -> None:
    root = tmp_path / "root"
    nodefile.save(root, NodeSpec(profile_file=h100_booting(tmp_path, "3g.40gb, 3g.40gb"), gpus=2))
    surfaces = {"gpu": GpuSurface()}

    def ctl(*argv: str) -> int:
        return execute(["--root", str(root), *argv], surfaces=surfaces)

    try:
        assert ctl("temp", "0", "30") == 0  # the first change stages the node, partitioned
        both = ["gpu{n}/mig/gi1/access", "gpu{n}/mig/gi1/ci0/access",
                "gpu{n}/mig/gi2/access", "gpu{n}/mig/gi2/ci0/access"]
        assert capability_files(root) == [f.format(n=n) for n in (0, 1) for f in both]
        capsys.readouterr()
        assert ctl("mig", "1", "list") == 0
        assert capsys.readouterr().out.splitlines()[1:] == ["  GI 1: 3g.40gb, placement 0; CI 0 (3 slices)",
                                                           "  GI 2: 3g.40gb, placement 4; CI 0 (3 slices)"]
        assert ctl("mig", "0", "destroy", "all") == 0
        assert capability_files(root) == [f.format(n=1) for f in both]
        assert ctl("reset", "0") == 0  # back to the profile: the boot layout again
        assert capability_files(root) == [f.format(n=n) for n in (0, 1) for f in both]
    finally:
        staging.teardown_all(root)
    assert not (root / LIB_DIR / "mokka-nvml.settings").exists()


@needs_library
def test_a_layout_the_library_cannot_place_publishes_nothing(tmp_path: Path, capsys) -> None:
    root = tmp_path / "root"
    # fits the slice counts (7 of 7, 8 of 8 memory slices), but placed in this order the 3g.40gb finds neither of
    # its starts free: the MIG user guide's own example (`-cgi 19,19,14,9`: "3g.20gb must be specified first")
    layout = "1g.10gb, 1g.10gb, 2g.20gb, 3g.40gb"
    nodefile.save(root, NodeSpec(profile_file=h100_booting(tmp_path, layout), gpus=1))
    assert execute(["--root", str(root), "temp", "0", "30"], surfaces={"gpu": GpuSurface()}) == 1
    assert f"mig.layout {layout} does not fit" in capsys.readouterr().err
    assert staging.staged_surfaces(root) == []
    assert not (root / LIB_DIR).exists()
