"""The GPU Operator's validator (``nvidia-validator`` of gpu-operator v26.7.0, kept in ``../shared/consumers``) inside
``mokka run``, as its init containers run it on every GPU node.

Its pod mounts the host's root at ``/host``: here the command runs chrooted into a root that is the node's ``/``
plus ``/host`` (the same ``/``), built on a private tmpfs, so nothing it writes (``/host-dev-char``, its status
directory) reaches the machine. What each component checks is the validator's own code
(cmd/nvidia-validator/main.go): ``driver`` finds ``/host/usr/bin/nvidia-smi`` and runs ``chroot /host nvidia-smi``,
``toolkit`` runs ``nvidia-smi``, ``nvidia-fs``/``gdrcopy``/``nvidia-peermem`` grep lsmod for ``nvidia_fs``,
``^gdrdrv\\s`` and ``^nvidia_peermem\\s``. Expected outcomes are a real node's: a healthy driver install passes,
a GPU that fell off the bus fails nvidia-smi (exit 15, "GPU is lost") and so the driver check; a module check
passes exactly where the module is loaded. ``mofed`` needs the API server (the node's Mellanox label) and is not
run here.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from boards import PROFILES
from conftest import mokka_run

from mokka_core.schema.builtin import builtin_path
from mokka_core.testing.consumers import apt_tool, shared_consumer

pytestmark = pytest.mark.consumer

#: ``sh HOSTROOT WORKDIR CMD...``: CMD chrooted into this namespace's / with / again at /host (the validator pod's
#: host-root mount); every mount on a tmpfs at WORKDIR, in mokka run's private namespace
HOSTROOT = """
set -e
w=$1; shift
mount -t tmpfs validator "$w"
for entry in /*; do
  name=${entry#/}
  if [ -L "$entry" ]; then ln -s "$(readlink "$entry")" "$w/$name"
  elif [ -d "$entry" ]; then mkdir "$w/$name"; mount --rbind "$entry" "$w/$name"
  fi
done
mkdir "$w/host"; mount --rbind / "$w/host"
exec chroot "$w" "$@"
"""
#: its status directory (the pod's /run/nvidia/validations hostPath), on the private root's tmpfs
STATUS = "/validations"


@pytest.fixture(scope="module")
def validator(real_node: None) -> Path:
    apt_tool("lsmod", "kmod")  # the module checks run `lsmod | grep`
    return shared_consumer("nvidia-validator")


def validate(validator: Path, profile: str | Path, component: str, tmp_path: Path, before: str = "") -> tuple[
        int, str, dict[str, str]]:
    """Run ``--component COMPONENT`` (after the shell command ``before``): its exit status, output and the status
    files it left (name -> content)."""
    script, work, out = tmp_path / "hostroot.sh", tmp_path / "root", tmp_path / "status"
    script.write_text(HOSTROOT)
    work.mkdir()
    command = (f"{before} sh {script} {work} {validator} --component {component} --output-dir {STATUS} "
               f"--disable-dev-char-symlink-creation; rc=$?; mkdir -p {out}; cp -r {work}{STATUS}/. {out}/ "
               f"2>/dev/null; exit $rc")
    done = mokka_run(profile, "sh", "-c", command)
    files = {path.name: path.read_text() for path in out.iterdir()} if out.is_dir() else {}
    return done.returncode, done.stdout + done.stderr, files


@pytest.mark.parametrize("profile", PROFILES)
def test_driver_passes_on_every_healthy_node(validator: Path, profile: str, tmp_path: Path) -> None:
    rc, output, files = validate(validator, profile, "driver", tmp_path)
    assert rc == 0, output[-3000:]
    assert "Detected a pre-installed driver on the host" in output
    # what the validator tells the operator's later pods: a host driver at /, seen at /host
    assert files["driver-ready"].splitlines() == [
        "IS_HOST_DRIVER=true", "NVIDIA_DRIVER_ROOT=/", "DRIVER_ROOT_CTR_PATH=/host", "NVIDIA_DEV_ROOT=/",
        "DEV_ROOT_CTR_PATH=/host"]


def test_driver_fails_with_a_gpu_fallen_off_the_bus(validator: Path, tmp_path: Path) -> None:
    lose = "nvml-mock-ctl fail 2 fallen-off-bus >/dev/null;"
    rc, output, files = validate(validator, "h100", "driver", tmp_path, lose)
    assert rc != 0 and "driver-ready" not in files
    # nvidia-smi's own words and exit status for a lost GPU (NVML_ERROR_GPU_IS_LOST)
    assert "GPU is lost" in output and "No pre-installed driver detected on the host: exit status 15" in output


def test_toolkit_passes_where_nvidia_smi_runs(validator: Path, tmp_path: Path) -> None:
    rc, output, files = validate(validator, "h100", "toolkit", tmp_path)
    assert rc == 0 and "toolkit-ready" in files, output[-3000:]


def gpudirect_profile(tmp_path: Path) -> Path:
    """h100 with every GPUDirect module loaded (system.gpudirect)."""
    document = yaml.safe_load(builtin_path("h100").read_text())
    document["system"]["gpudirect"] = {"rdma": True, "storage": True, "gdrcopy": True}
    path = tmp_path / "h100-gpudirect.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


#: the module each component's lsmod check looks for, and its status file
MODULE_CHECKS = {"nvidia-fs": ("storage", "nvidia-fs-ready"), "gdrcopy": ("gdrcopy", "gdrcopy-ready"),
                 "nvidia-peermem": ("rdma", "nvidia-peermem-ready")}


@pytest.mark.parametrize("component", sorted(MODULE_CHECKS))
@pytest.mark.parametrize("profile", ["h100", "l40s", "gb200", "gpudirect"])
def test_gpudirect_checks_pass_exactly_where_the_module_is_loaded(validator: Path, component: str, profile: str,
                                                                  tmp_path: Path) -> None:
    from mokka_core.model.spec import NodeSpec

    chosen: str | Path = gpudirect_profile(tmp_path) if profile == "gpudirect" else profile
    spec = NodeSpec(profile_file=chosen) if isinstance(chosen, Path) else NodeSpec(profile=chosen)
    node = spec.resolve()
    field, ready = MODULE_CHECKS[component]
    loaded = getattr(node.system.gpudirect, field) and (field != "rdma" or bool(node.hcas))
    rc, output, files = validate(validator, chosen, component, tmp_path)
    assert (rc == 0) == loaded and (ready in files) == loaded, output[-3000:]
