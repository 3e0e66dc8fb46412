"""The NVIDIA Container Toolkit's ``nvidia-ctk cdi generate`` (what the GPU operator runs on every node) on every
profile, and on an h100 booted partitioned.

nvidia-ctk finds the GPUs and MIG devices through go-nvml and go-nvlib, the driver's files by searching the library
directories (the loader cache, then the paths, resolving links) and /dev. What it writes is checked against what
the other tools in the same node report: nvidia-smi's UUIDs and minor numbers, the device nodes' own numbers
(stat), the MIG capability minors (/proc/driver/nvidia-caps/mig-minors), and the real paths of a driver install,
never a path of Mokka's private root.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml
from boards import PROFILES
from conftest import mokka_run
from test_gfd import partitioned_h100

from mokka_core.schema.builtin import load_builtin
from mokka_core.stage.paths import LIB_DIR

#: the compute, utility and video libraries of NVIDIA's driver packages beside libnvidia-ml, with the sonames their
#: real files carry (nvidia-ctk mounts every lib*.so.<driver version> of the driver's library directory and links each
#: to its soname; libnvidia-container's list of compute and video libraries)
DRIVER_LIBRARIES = {
    "libcuda.so": "libcuda.so.1", "libcudadebugger.so": "libcudadebugger.so.1",
    "libnvidia-ptxjitcompiler.so": "libnvidia-ptxjitcompiler.so.1", "libnvidia-nvvm.so": "libnvidia-nvvm.so.4",
    "libnvidia-opencl.so": "libnvidia-opencl.so.1", "libnvidia-allocator.so": "libnvidia-allocator.so.1",
    "libnvidia-cfg.so": "libnvidia-cfg.so.1", "libnvidia-encode.so": "libnvidia-encode.so.1",
    "libnvcuvid.so": "libnvcuvid.so.1", "libnvidia-opticalflow.so": "libnvidia-opticalflow.so.1",
}
#: the driver's libraries whose soname is their versioned file name (no link)
VERSIONED_SONAME = ("libnvidia-gpucomp.so",)

REPORT = """
{ctk} cdi generate --output={spec} 2>/dev/null || exit 1
nvidia-smi -L
nvidia-smi -q | grep 'Minor Number' | sed 's/.*: /minor=/'
stat -c 'node=%n %t %T' /dev/nvidia* /dev/nvidia-caps/* 2>/dev/null
sed 's/^/cap=/' /proc/driver/nvidia-caps/mig-minors
"""


def generate(ctk: Path, profile: str | Path, scratch: Path) -> tuple[dict, str]:
    """The spec nvidia-ctk writes inside ``mokka run``, and what the node's other tools report."""
    spec = scratch / "nvidia.yaml"
    # a node's PATH: nvidia-ctk searches it for the driver's programs (a test environment's bin holds nvidia-imex)
    plain = {**os.environ, "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
    done = mokka_run(profile, "sh", "-c", REPORT.format(ctk=ctk, spec=spec), env=plain)
    assert done.returncode == 0, done.stderr[-3000:]
    return yaml.safe_load(spec.read_text()), spec.read_text() + done.stdout


def nodes(report: str) -> dict[str, tuple[int, int]]:
    """Each device node's (major, minor), as stat gives them."""
    found = {}
    for line in report.splitlines():
        if line.startswith("node="):
            path, major, minor = line.removeprefix("node=").split()
            found[path] = (int(major, 16), int(minor, 16))
    return found


def spec_nodes(edits: dict) -> dict[str, tuple[int, int]]:
    return {node["path"]: (node.get("major", 0), node.get("minor", 0)) for node in edits.get("deviceNodes", [])}


@pytest.mark.consumer
@pytest.mark.parametrize("profile", PROFILES)
def test_ctk_spec_names_every_gpu_and_the_real_driver_files(nvidia_ctk: Path, profile: str, tmp_path: Path) -> None:
    spec, report = generate(nvidia_ctk, profile, tmp_path)
    driver = load_builtin(profile).system.driver_version
    uuids = re.findall(r"^GPU (\d+): .* \(UUID: (GPU-[0-9a-f-]+)\)$", report, re.M)
    minors = [int(m) for m in re.findall(r"^minor=(\d+)$", report, re.M)]
    assert len(uuids) == len(minors) == len(load_builtin(profile).devices), report[-2000:]
    devices = {device["name"]: device["containerEdits"] for device in spec["devices"]}
    assert set(devices) == {index for index, _ in uuids} | {uuid for _, uuid in uuids} | {"all"}
    shown = nodes(report)
    for (index, uuid), minor in zip(uuids, minors, strict=True):
        path = f"/dev/nvidia{minor}"
        assert spec_nodes(devices[index]) == spec_nodes(devices[uuid]) == {path: shown[path]} == {path: (195, minor)}
    common = spec_nodes(spec["containerEdits"])
    assert {path: shown[path] for path in common} == common
    assert {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"} <= set(common)
    assert common["/dev/nvidiactl"] == (195, 255)
    library = f"/{LIB_DIR}/libnvidia-ml.so.{driver}"
    mounts = {mount["hostPath"]: mount["containerPath"] for mount in spec["containerEdits"]["mounts"]}
    assert mounts[library] == library and mounts["/usr/bin/nvidia-smi"] == "/usr/bin/nvidia-smi"
    # the state feed of GPU containers: nvcdi binds nvidia-persistenced's socket where the driver root has one
    assert mounts["/run/nvidia-persistenced/socket"] == "/run/nvidia-persistenced/socket"
    hooks = [hook["args"][1:] for hook in spec["containerEdits"]["hooks"]]
    links = {arg for args in hooks if args[:1] == ["create-symlinks"] for arg in args[2::2]}
    assert {f"libnvidia-ml.so.{driver}::/{LIB_DIR}/libnvidia-ml.so.1",
            f"libnvidia-ml.so.1::/{LIB_DIR}/libnvidia-ml.so"} <= links
    # the driver package's other libraries, each mounted and linked to its soname as on a real node
    for library, soname in DRIVER_LIBRARIES.items():
        assert mounts[f"/{LIB_DIR}/{library}.{driver}"] == f"/{LIB_DIR}/{library}.{driver}"
        assert f"{library}.{driver}::/{LIB_DIR}/{soname}" in links
    for library in VERSIONED_SONAME:
        assert mounts[f"/{LIB_DIR}/{library}.{driver}"] == f"/{LIB_DIR}/{library}.{driver}"
        assert not any(link.startswith(f"{library}.{driver}::") for link in links)
    # a tray's IMEX daemon and its ctl, at the nvidia-imex package's paths (nvidia-ctk mounts them for ComputeDomains)
    imex = {"/usr/bin/nvidia-imex", "/usr/bin/nvidia-imex-ctl"}
    assert (imex <= set(mounts)) == (profile in ("gb200", "gb300")), sorted(mounts)
    assert ["update-ldcache", "--folder", f"/{LIB_DIR}"] in hooks
    assert "/mokka-run-" not in report


@pytest.mark.consumer
def test_the_driver_libraries_load_by_their_sonames(tmp_path: Path) -> None:
    """Each driver library is an ELF shared object that dlopen loads by its soname, as programs load them."""
    driver = load_builtin("h100").system.driver_version
    names = " ".join([*DRIVER_LIBRARIES.values(), *(f"{library}.{driver}" for library in VERSIONED_SONAME)])
    script = ("import ctypes, sys\nfor name in sys.argv[1:]:\n    ctypes.CDLL(name)\n    print('loaded', name)\n")
    done = mokka_run("h100", "sh", "-c", f"python3 -c \"{script}\" {names}")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[1::2] == names.split()


@pytest.mark.consumer
def test_ctk_spec_gives_each_mig_device_its_capabilities(nvidia_ctk: Path, tmp_path: Path) -> None:
    layout = ["3g.40gb", "2g.20gb", "1g.10gb"]
    spec, report = generate(nvidia_ctk, partitioned_h100(tmp_path, layout), tmp_path)
    devices = {device["name"]: device["containerEdits"] for device in spec["devices"]}
    migs = re.findall(r"^  MIG (\S+) +Device +(\d+): \(UUID: (MIG-[0-9a-f-]+)\)$", report, re.M)
    assert [name for name, _, _ in migs] == layout * 8, report[-3000:]
    minors = [int(m) for m in re.findall(r"^minor=(\d+)$", report, re.M)]
    caps = {int(minor): name for name, minor in re.findall(r"^cap=(\S+) (\d+)$", report, re.M)}
    shown = nodes(report)
    mig_names = sorted(name for name in devices if ":" in name)
    assert mig_names == sorted(f"{gpu}:{mig}" for gpu in range(8) for mig in range(3))
    for name in mig_names:
        gpu = int(name.split(":")[0])
        edits = spec_nodes(devices[name])
        assert edits.pop(f"/dev/nvidia{minors[gpu]}") == (195, minors[gpu])
        granted = sorted(caps[minor] for _, minor in edits.values())
        assert len(granted) == 2 and all(shown[path] == number for path, number in edits.items()), edits
        instance = re.fullmatch(rf"gpu{gpu}/gi(\d+)/access", granted[0])  # the GPU instance and its compute one
        assert instance and granted[1] == f"gpu{gpu}/gi{instance[1]}/ci0/access", granted
    assert {uuid for _, _, uuid in migs} <= set(devices)
