"""nvidia-mig-parted (the GPU operator's MIG manager) partitioning every MIG board through the NVML setters.

For each MIG-capable profile, every configuration that the release's shipped ``config-default.yaml`` gives that
board (an entry whose device filter names its PCI device id, or one for all devices whose MIG devices all are
the board's GPU-instance profiles of the MIG user guide, ``boards.py``) is applied, asserted and exported, each
by a new process, and nvidia-smi then lists exactly the MIG devices the configuration asks for on every GPU.
mig-parted enables MIG mode (``nvmlDeviceSetMigMode``, a reset through ``nvidia-smi -r`` when pending), clears
what is there and creates the GPU and compute instances, trying its orderings until one fits; so the node's
state must carry from process to process, and the placements must admit what NVIDIA ships as valid. GB300's
MIG table is not public: its profile has none, so it is not among them.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
import yaml
from boards import BOARDS, PROFILES
from conftest import mokka_run

MIG_BOARDS = [profile for profile in PROFILES if BOARDS[profile].mig_profiles]
GPUS = 2
STEP = """
echo "== $1"
{mp} apply -f {configs} -c "$1" > "{logs}/apply-$1.log" 2>&1; echo "apply=$?"
{mp} assert -f {configs} -c "$1" > "{logs}/assert-$1.log" 2>&1; echo "assert=$?"
{mp} export 2>/dev/null | sed 's/^/export: /'
nvidia-smi -L
"""


def shipped_for(configs: dict, profile: str) -> dict[str, dict[str, int] | None]:
    """Each shipped configuration that applies to the board: its MIG devices per GPU (None: MIG disabled)."""
    board = BOARDS[profile]
    device_id = f"0x{board.pci_device:04x}10de"
    chosen: dict[str, dict[str, int] | None] = {}
    for name, entries in configs["mig-configs"].items():
        for entry in entries:
            wanted = entry.get("device-filter")
            filters = [wanted] if isinstance(wanted, str) else wanted
            if filters is not None and device_id not in (f.lower() for f in filters):
                continue
            devices = entry.get("mig-devices") or {}
            if all(device in board.mig_profiles for device in devices):
                chosen[name] = dict(devices) if entry["mig-enabled"] else None
    return chosen


def sections(output: str) -> dict[str, str]:
    return {part.split("\n", 1)[0]: part for part in output.split("== ")[1:]}


def mig_devices_listed(section: str) -> list[Counter[str]]:
    """nvidia-smi -L: the MIG devices under each GPU, by name."""
    gpus: list[Counter[str]] = []
    for line in section.splitlines():
        if line.startswith("GPU "):
            gpus.append(Counter())
        elif match := re.match(r"\s+MIG (\S+)\s+Device\s+\d+:", line):
            gpus[-1][match.group(1)] += 1
    return gpus


@pytest.mark.consumer
@pytest.mark.parametrize("profile", MIG_BOARDS)
def test_mig_parted_applies_every_shipped_configuration_of_the_board(mig_parted: Path, mig_parted_configs: Path,
                                                                      profile: str, tmp_path: Path) -> None:
    shipped = shipped_for(yaml.safe_load(mig_parted_configs.read_text()), profile)
    assert len(shipped) >= 8, shipped  # the whole-GPU, single-profile and balanced ones at least
    order = ["all-disabled", *(name for name in shipped if name != "all-disabled"), "all-disabled"]
    script = tmp_path / "steps.sh"
    script.write_text(f"step() {{{STEP.format(mp=mig_parted, configs=mig_parted_configs, logs=tmp_path)}}}\n"
                      + "".join(f"step {name}\n" for name in order))
    done = mokka_run(profile, "sh", str(script), options=("--gpus", str(GPUS)), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    found = sections(done.stdout)
    for name, devices in shipped.items():
        section = found[name]
        log = (tmp_path / f"apply-{name}.log").read_text()
        assert "apply=0" in section and "MIG configuration applied successfully" in log, log[-2000:]
        assert "assert=0" in section, (tmp_path / f"assert-{name}.log").read_text()[-2000:]
        expected = Counter(devices or {})
        assert mig_devices_listed(section) == [expected] * GPUS, section
        exported = yaml.safe_load("\n".join(line.removeprefix("export: ") for line in section.splitlines()
                                            if line.startswith("export: ")))
        groups = exported["mig-configs"]["current"]
        assert [(g["devices"], g["mig-enabled"], g.get("mig-devices") or {}) for g in groups] == \
            [("all", devices is not None, devices or {})], section
    assert mig_devices_listed(found["all-disabled"]) == [Counter()] * GPUS
