"""The spec against real consumers: Debian's CDI Go package (what runtimes use) and runc."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import time
from pathlib import Path

import pytest

from mokka_core.model.spec import NodeSpec
from mokka_core.stage.paths import LIB_DIR, NVML_STATE_FILE
from mokka_core.stage.staging import stage_wave
from mokka_core.stage.surface import StageContext
from mokka_sim_cdi.spec import SPEC_FILE, STATE_MOUNT
from mokka_sim_cdi.surface import CdiSurface

pytestmark = pytest.mark.consumer


def stage(root: Path, profile: str = "h100", gpus: int | None = None, failed: bool = False) -> Path:
    node = NodeSpec(profile=profile, gpus=gpus, surfaces={"cdi": {"state": "failed" if failed else "healthy"}})
    stage_wave({"cdi": CdiSurface().plan(node.resolve(), StageContext(root=root))}, root)
    return root / SPEC_FILE


def check(binary: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("profile", ["a100", "h100", "gb200", "t4"])
def test_go_cdi_package_accepts_the_spec(tmp_path: Path, cdi_check: Path, profile: str) -> None:
    result = check(cdi_check, "validate", str(stage(tmp_path, profile)))
    assert result.returncode == 0, result.stderr
    node = NodeSpec(profile=profile).resolve()
    version, kind, *names = result.stdout.split()[1:]
    assert (version, kind) == ("0.5.0", "nvidia.com/gpu")
    assert sorted(names) == sorted([str(g.index) for g in node.gpus] + [g.uuid for g in node.gpus] + ["all"])


def test_go_cdi_package_accepts_mig_devices(tmp_path: Path, cdi_check: Path, h100_partition) -> None:
    from mokka_core.stage import mig_partition

    node = NodeSpec(profile="h100", gpus=2).resolve()
    mig = h100_partition
    stage_wave({"cdi": CdiSurface().plan(node, StageContext(root=tmp_path, mig=mig))}, tmp_path)
    result = check(cdi_check, "validate", str(tmp_path / SPEC_FILE))
    assert result.returncode == 0, result.stderr
    names = result.stdout.split()[3:]
    assert {"0:0", "0:1", mig_partition.mig_uuid(node.gpus[0].uuid, 7, 0)} <= set(names)


def test_failed_spec_still_parses(tmp_path: Path, cdi_check: Path) -> None:
    result = check(cdi_check, "validate", str(stage(tmp_path, failed=True)))
    assert result.returncode == 0, result.stderr


def test_debian_12_runtimes_refuse_cdi_0_6(tmp_path: Path, cdi_check: Path) -> None:
    """Why the spec says 0.5.0: the runtimes' CDI package of Debian 12 rejects newer versions."""
    newer = tmp_path / "newer.yaml"
    newer.write_text(stage(tmp_path).read_text().replace("cdiVersion: 0.5.0", "cdiVersion: 0.6.0"))
    result = check(cdi_check, "validate", str(newer))
    assert result.returncode == 1 and 'invalid version "0.6.0"' in result.stderr


def driver_footprint(root: Path, gpus: int) -> None:
    """Stand-in for the gpu surface: the device nodes and library files the spec names."""
    nodes = {f"nvidia{i}": (195, i) for i in range(gpus)}
    nodes |= {"nvidiactl": (195, 255), "nvidia-uvm": (510, 0), "nvidia-uvm-tools": (510, 1)}
    (root / "dev").mkdir(exist_ok=True)
    for name, (major, minor) in nodes.items():
        os.mknod(root / "dev" / name, stat.S_IFCHR | 0o666, os.makedev(major, minor))
    (root / LIB_DIR).mkdir(parents=True, exist_ok=True)
    (root / LIB_DIR / "libnvidia-ml.so.1").write_text("stand-in for the mock library\n")
    (root / NVML_STATE_FILE).write_text("state v1\n")


def bundle(base: Path, script: str) -> Path:
    rootfs = base / "rootfs"
    (rootfs / "bin").mkdir(parents=True)
    shutil.copy("/bin/busybox", rootfs / "bin" / "busybox")
    for tool in ("sh", "ls", "test", "cat", "echo", "head", "sleep"):
        (rootfs / "bin" / tool).symlink_to("busybox")
    subprocess.run(["runc", "spec", "--bundle", str(base)], check=True, capture_output=True)
    config = json.loads((base / "config.json").read_text())
    config["process"]["terminal"] = False
    config["process"]["args"] = ["/bin/sh", "-c", script]
    config["root"] = {"path": "rootfs", "readonly": True}
    (base / "config.json").write_text(json.dumps(config))
    return base / "config.json"


def run_container(runc: Path, base: Path, name: str) -> subprocess.CompletedProcess[str]:
    state = base / "runc-state"
    result = subprocess.run([str(runc), "--root", str(state), "run", "--bundle", str(base), name],
                            capture_output=True, text=True, timeout=120)
    subprocess.run([str(runc), "--root", str(state), "delete", "--force", name], capture_output=True)
    return result


@pytest.mark.root
def test_runc_container_sees_the_gpu_it_asked_for(tmp_path: Path, cdi_check: Path, runc: Path) -> None:
    root = tmp_path / "node"
    root.mkdir()
    stage(root, gpus=2)
    driver_footprint(root, 2)
    base = tmp_path / "bundle"
    script = ("ls -l /dev/nvidia0 /dev/nvidiactl /dev/nvidia-uvm; test -c /dev/nvidia0 && echo HAS-NVIDIA0; "
              "test -e /dev/nvidia1 || echo NO-NVIDIA1; "
              f"test -f /{LIB_DIR}/libnvidia-ml.so.1 && echo HAS-LIBRARY; head -1 $MOKKA_NVML_STATE")
    config = bundle(base, script)
    injected = check(cdi_check, "inject", str(root / "var/run/cdi"), str(config), "nvidia.com/gpu=0")
    assert injected.returncode == 0, injected.stderr
    assert f"MOKKA_NVML_STATE={STATE_MOUNT}/mokka-nvml.state" in json.loads(config.read_text())["process"]["env"]
    result = run_container(runc, base, f"mokka-cdi-{os.getpid()}")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "HAS-NVIDIA0" in lines and "NO-NVIDIA1" in lines and "HAS-LIBRARY" in lines
    assert "state v1" in lines
    assert any(line.startswith("crw") and "195,   0" in line and line.endswith("/dev/nvidia0") for line in lines)


@pytest.mark.root
def test_state_file_replaced_atomically_stays_visible(tmp_path: Path, cdi_check: Path, runc: Path) -> None:
    """Writers rename a new state file into place; the container must see the new one (a file bind would not)."""
    root = tmp_path / "node"
    root.mkdir()
    stage(root, gpus=1)
    driver_footprint(root, 1)
    base = tmp_path / "bundle"
    script = ('i=0; while [ "$(head -1 $MOKKA_NVML_STATE)" = "state v1" ] && [ $i -lt 100 ]; do '
              'sleep 0.1; i=$((i+1)); done; head -1 $MOKKA_NVML_STATE')
    config = bundle(base, script)
    assert check(cdi_check, "inject", str(root / "var/run/cdi"), str(config), "nvidia.com/gpu=0").returncode == 0
    state = base / "runc-state"
    name = f"mokka-cdi-state-{os.getpid()}"
    proc = subprocess.Popen([str(runc), "--root", str(state), "run", "--bundle", str(base), name],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.0)
        replacement = root / f"{NVML_STATE_FILE}.new"
        replacement.write_text("state v2\n")
        os.replace(replacement, root / NVML_STATE_FILE)
        out, err = proc.communicate(timeout=60)
    finally:
        subprocess.run([str(runc), "--root", str(state), "delete", "--force", name], capture_output=True)
    assert proc.returncode == 0, err
    assert out.strip() == "state v2"


@pytest.mark.root
def test_uuid_and_all_names_resolve(tmp_path: Path, cdi_check: Path, runc: Path) -> None:
    root = tmp_path / "node"
    root.mkdir()
    stage(root, gpus=2)
    driver_footprint(root, 2)
    base = tmp_path / "bundle"
    config = bundle(base, "test -c /dev/nvidia0 && test -c /dev/nvidia1 && echo BOTH")
    uuid = NodeSpec(profile="h100", gpus=2).resolve().gpus[1].uuid
    for device in (f"nvidia.com/gpu={uuid}", "nvidia.com/gpu=all"):
        result = check(cdi_check, "inject", str(root / "var/run/cdi"), str(config), device)
        assert result.returncode == 0, result.stderr
    result = run_container(runc, base, f"mokka-cdi-all-{os.getpid()}")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "BOTH"


def test_failed_spec_is_refused_at_injection(tmp_path: Path, cdi_check: Path) -> None:
    root = tmp_path / "node"
    root.mkdir()
    stage(root, gpus=2, failed=True)
    if os.geteuid() == 0:
        driver_footprint(root, 2)  # everything present except the nodes under the missing driver root
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"ociVersion": "1.0.2", "process": {"args": ["true"], "cwd": "/"},
                                  "root": {"path": "rootfs"}, "linux": {}}))
    result = check(cdi_check, "inject", str(root / "var/run/cdi"), str(config), "nvidia.com/gpu=0")
    assert result.returncode == 1
    assert str(root / "run/nvidia/driver/dev/nvidia0") in result.stderr
