"""nvml-mock-ctl mig and real nvidia-smi 550 make the same partition: each sees what the other made."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from mokka_core.ctl.cli import execute
from mokka_core.model.spec import NodeSpec
from mokka_core.stage import mig_partition, nodefile
from mokka_core.stage.native import native_dir
from mokka_core.stage.paths import LIB_DIR
from mokka_core.testing import consumers
from mokka_core.testing.runner import nvml_surface

if native_dir() is None:
    pytest.skip("mock libnvidia-ml not built (make -C native install)", allow_module_level=True)

pytestmark = pytest.mark.consumer


@pytest.fixture
def node(tmp_path: Path):
    root = tmp_path / "root"
    nodefile.save(root, NodeSpec(profile="h100", gpus=2))
    surfaces = {"gpu": nvml_surface()}
    smi = consumers.require("nvidia-smi", version="550")

    def ctl(*argv: str) -> int:
        return execute(["--root", str(root), *argv], surfaces=surfaces)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "LD_LIBRARY_PATH": str(root / LIB_DIR)}
        return subprocess.run([str(smi), *args], env=env, capture_output=True, text=True, timeout=60)

    assert ctl("temp", "0", "20") == 0
    return root, ctl, run


def test_ctl_partition_is_listed_by_nvidia_smi_with_the_uuids_mokka_derives(node) -> None:
    root, ctl, smi = node
    assert ctl("mig", "0", "on") == 0
    assert ctl("mig", "0", "create", "3g.40gb,1g.10gb") == 0
    listing = smi("-L").stdout
    found = re.findall(r"MIG (\S+)\s+Device\s+(\d+): \(UUID: (MIG-[0-9a-f-]+)\)", listing)
    gpu0 = nodefile.load(root).resolve().gpus[0]
    # placed as the driver places them (the MIG user guide's `-cgi 9,19,...`: 3g at 4:4 id 2, 1g at 0:1 id 7)
    assert found == [("3g.40gb", "0", mig_partition.mig_uuid(gpu0.uuid, 2, 0)),
                     ("1g.10gb", "1", mig_partition.mig_uuid(gpu0.uuid, 7, 0))], listing
    assert [instance.start for instance in mig_partition.read(root)[0]] == [4, 0]


def test_nvidia_smi_partition_is_seen_and_destroyed_by_ctl(node, capsys) -> None:
    _, ctl, smi = node
    assert smi("-i", "1", "-mig", "1").returncode == 0
    made = smi("mig", "-i", "1", "-cgi", "9,9", "-C")
    assert made.returncode == 0, made.stdout + made.stderr
    capsys.readouterr()
    assert ctl("mig", "1", "list") == 0
    assert capsys.readouterr().out.splitlines() == ["GPU 1:", "  GI 1: 3g.40gb, placement 0; CI 0 (3 slices)",
                                                     "  GI 2: 3g.40gb, placement 4; CI 0 (3 slices)"]
    assert ctl("mig", "1", "create", "1g.10gb") == 1  # full, as nvidia-smi finds it
    assert "Insufficient Resources" in capsys.readouterr().err
    assert ctl("mig", "1", "destroy", "all") == 0
    listed = smi("mig", "-i", "1", "-lgi")
    assert (listed.returncode, listed.stdout) == (6, "No GPU instances found: Not Found\n")  # NVML_ERROR_NOT_FOUND


#: the MIG user guide's B200 table, the GB200 names AWS lists (see gb200.yaml): what `nvidia-smi mig -lgip`
#: lists (name, instances)
BLACKWELL_TABLES = {
    "b200": [("1g.23gb", 7), ("1g.23gb+me", 1), ("1g.45gb", 4), ("2g.45gb", 3), ("3g.90gb", 2), ("4g.90gb", 1),
             ("7g.180gb", 1)],
    "gb200": [("1g.23gb", 7), ("1g.23gb+me", 1), ("1g.47gb", 4), ("2g.47gb", 3), ("3g.93gb", 2), ("4g.93gb", 1),
              ("7g.186gb", 1)],
}


@pytest.mark.parametrize("board", sorted(BLACKWELL_TABLES))
def test_blackwell_boards_list_their_profiles_and_partition(tmp_path: Path, board: str) -> None:
    root = tmp_path / "root"
    nodefile.save(root, NodeSpec(profile=board, gpus=1))
    smi = consumers.require("nvidia-smi", version="550")
    assert execute(["--root", str(root), "temp", "0", "30"], surfaces={"gpu": nvml_surface()}) == 0
    env = {**os.environ, "LD_LIBRARY_PATH": str(root / LIB_DIR)}

    def run(*args: str) -> str:
        done = subprocess.run([str(smi), *args], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    run("-i", "0", "-mig", "1")
    listed = re.findall(r"MIG (\S+)\s+\d+\s+(\d+)/(\d+)", run("mig", "-lgip"))
    assert [(name, int(total)) for name, _free, total in listed] == BLACKWELL_TABLES[board]
    run("mig", "-cgi", "9,19", "-C")
    names = re.findall(r"MIG (\S+)\s+Device\s+\d+:", run("-L"))
    assert names == [BLACKWELL_TABLES[board][4][0], BLACKWELL_TABLES[board][0][0]]


def test_a_profile_table_the_partition_breaks_is_refused(node, capsys) -> None:
    import json

    root, ctl, _ = node
    assert ctl("mig", "0", "on") == 0
    assert ctl("mig", "0", "create", "1g.10gb,1g.10gb") == 0
    rows = nodefile.load(root).resolve().gpus[0].config.mig.gpu_instance_profiles
    table = [{k: list(v) if isinstance(v, tuple) else v for k in type(p).__slots__ if (v := getattr(p, k)) is not None}
             for p in rows]
    for row in table:
        if row["name"] == "1g.10gb":
            row["instances"] = 1  # two exist
    capsys.readouterr()
    assert ctl("set", "0", f"mig.gpu_instance_profiles={json.dumps(table)}") == 1
    err = capsys.readouterr().err
    assert "more than its instances" in err and "override unchanged" in err, err
    assert len(mig_partition.read(root)[0]) == 2
