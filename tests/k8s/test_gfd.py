"""gpu-feature-discovery (k8s-device-plugin's cmd/gpu-feature-discovery), one-shot, on every profile.

GFD reads NVML through go-nvml and DMI's product_name from the file; with ``--use-node-feature-api=false``
it writes its labels to ``--output-file`` and exits. Every label is what the real board gets: names, memory,
compute capabilities and MIG attributes from the captures and real ``nvidia-smi mig -lgip`` output (boards.py),
the CUDA version of the driver branch from NVIDIA's table, the machine from the profile's DMI identity.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest
from boards import ARCH_ADA, ARCH_AMPERE, ARCH_BLACKWELL, ARCH_HOPPER, ARCH_TURING, BOARDS, CUDA_OF_BRANCH, PROFILES
from conftest import mokka_run

from mokka_core.schema.builtin import builtin_text, load_builtin

LABEL = "nvidia.com/"
#: GFD's family names of the architectures (gpu.family)
FAMILY = {ARCH_TURING: "turing", ARCH_AMPERE: "ampere", ARCH_ADA: "ada-lovelace", ARCH_HOPPER: "hopper",
          ARCH_BLACKWELL: "blackwell"}
#: what real ``nvidia-smi mig -lgip`` prints for an H100 80GB HBM3 (memory: the GiB it prints x 1024):
#: name -> (memory MiB, SMs, copy engines, decoders, encoders, JPEG, OFA, GPU-instance slices)
H100_MIG = {"1g.10gb": (9984, 16, 1, 1, 0, 1, 0, 1), "2g.20gb": (20096, 32, 2, 2, 0, 2, 0, 2),
            "3g.40gb": (40448, 60, 3, 3, 0, 3, 0, 3)}
MIG_OFF = "    mode_current: disabled\n    mode_pending: disabled\n"


def sanitised(name: str) -> str:
    """A name as GFD writes it in a label value: only [A-Za-z0-9-_. ], blanks as one '-'."""
    return "-".join(re.sub(r"[^A-Za-z0-9\-_. ]", "", name).split())


def run_gfd(gfd: Path, profile: str | Path, scratch: Path, *flags: str,
            options: tuple[str, ...] = ()) -> dict[str, str]:
    output = scratch / "labels"
    done = mokka_run(profile, str(gfd), "--oneshot", "--no-timestamp", "--use-node-feature-api=false",
                     "--fail-on-init-error", f"--output-file={output}", *flags, options=options)
    assert done.returncode == 0, done.stderr[-3000:]
    labels = {}
    for line in output.read_text().splitlines():
        key, _, value = line.partition("=")
        assert key.startswith(LABEL), line
        labels[key.removeprefix(LABEL)] = value
    return labels


@functools.cache
def expected(profile: str) -> dict[str, str]:
    """The labels a real node of this profile gets from GFD (no MIG strategy, no sharing)."""
    board, spec = BOARDS[profile], load_builtin(profile)
    driver = spec.system.driver_version
    major, minor, rev = driver.split(".")
    cuda = CUDA_OF_BRANCH[int(major)]
    labels = {
        "gpu.product": sanitised(board.name), "gpu.count": str(len(spec.devices)),
        "gpu.memory": str(board.fb_total_mib), "gpu.family": FAMILY[board.architecture],
        "gpu.compute.major": str(board.compute_capability[0]), "gpu.compute.minor": str(board.compute_capability[1]),
        "gpu.machine": sanitised(spec.system.dmi.product_name), "gpu.mode": "compute",
        "gpu.replicas": "1", "gpu.sharing-strategy": "none",
        "mig.capable": str(board.mig_capable).lower(), "mps.capable": "false", "vgpu.present": "false",
        "cuda.driver.major": major, "cuda.driver.minor": minor, "cuda.driver.rev": rev,
        "cuda.driver-version.major": major, "cuda.driver-version.minor": minor,
        "cuda.driver-version.revision": rev, "cuda.driver-version.full": driver,
        "cuda.runtime.major": str(cuda[0]), "cuda.runtime.minor": str(cuda[1]),
        "cuda.runtime-version.major": str(cuda[0]), "cuda.runtime-version.minor": str(cuda[1]),
        "cuda.runtime-version.full": f"{cuda[0]}.{cuda[1]}",
    }
    if board.fabric_attached:  # a Completed fabric state and a cluster UUID: the IMEX domain GFD names
        fabric = spec.device_defaults.fabric
        labels["gpu.clique"] = f"{fabric.cluster_uuid}.{fabric.clique_id}"
    return labels


@pytest.mark.consumer
@pytest.mark.parametrize("profile", PROFILES)
def test_gfd_labels_the_real_board(gfd: Path, profile: str, tmp_path: Path) -> None:
    assert run_gfd(gfd, profile, tmp_path) == expected(profile)


@pytest.mark.consumer
def test_gfd_names_no_clique_while_the_fabric_manager_is_down(gfd: Path, tmp_path: Path) -> None:
    """Without its fabric manager a GB200 tray's fabric stays "In Progress": no IMEX domain to name."""
    labels = run_gfd(gfd, "gb200", tmp_path, options=("--fail", "fabricmanager"))
    assert labels["gpu.product"] == "NVIDIA-GB200" and "gpu.clique" not in labels, labels


def partitioned_h100(scratch: Path, layout: list[str]) -> Path:
    """The h100 profile booting with MIG on and every GPU partitioned as ``layout``."""
    text = builtin_text("h100")
    assert MIG_OFF in text
    path = scratch / "h100-mig.yaml"
    path.write_text(text.replace(MIG_OFF, "    mode_current: enabled\n    mode_pending: enabled\n"
                                          f"    layout: [{', '.join(layout)}]\n", 1))
    return path


def mig_labels(resource: str, name: str, count: int) -> dict[str, str]:
    memory, sms, copy, decoders, encoders, jpegs, ofas, slices = H100_MIG[name]
    return {f"{resource}.count": str(count), f"{resource}.memory": str(memory),
            f"{resource}.multiprocessors": str(sms), f"{resource}.slices.gi": str(slices),
            f"{resource}.slices.ci": str(slices), f"{resource}.engines.copy": str(copy),
            f"{resource}.engines.decoder": str(decoders), f"{resource}.engines.encoder": str(encoders),
            f"{resource}.engines.jpeg": str(jpegs), f"{resource}.engines.ofa": str(ofas),
            f"{resource}.replicas": "1", f"{resource}.sharing-strategy": "none"}


@pytest.mark.consumer
def test_gfd_single_strategy_labels_the_mig_devices_as_the_gpus(gfd: Path, tmp_path: Path) -> None:
    labels = run_gfd(gfd, partitioned_h100(tmp_path, ["3g.40gb", "3g.40gb"]), tmp_path, "--mig-strategy=single")
    want = {**mig_labels("gpu", "3g.40gb", 16), "gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-3g.40gb",
            "mig.strategy": "single", "mig.capable": "true"}
    assert {key: labels.get(key) for key in want} == want, labels
    assert not [key for key in labels if key.startswith("mig-")], labels


@pytest.mark.consumer
def test_gfd_mixed_strategy_labels_each_mig_profile(gfd: Path, tmp_path: Path) -> None:
    layout = ["3g.40gb", "2g.20gb", "1g.10gb"]
    labels = run_gfd(gfd, partitioned_h100(tmp_path, layout), tmp_path, "--mig-strategy=mixed")
    want = {"mig.strategy": "mixed", "gpu.product": "NVIDIA-H100-80GB-HBM3", "gpu.count": "8",
            "gpu.memory": str(BOARDS["h100"].fb_total_mib)}
    for name in layout:
        want.update({key: value for key, value in mig_labels(f"mig-{name}", name, 8).items()
                     if not key.endswith(("replicas", "sharing-strategy"))})
        want[f"mig-{name}.product"] = f"NVIDIA-H100-80GB-HBM3-MIG-{name}"
    assert {key: labels.get(key) for key in want} == want, labels
    resources = {key.rsplit(".", 1)[0] for key in labels if key.startswith("mig-") and key.endswith(".count")}
    assert resources == {f"mig-{name}" for name in layout}, labels
