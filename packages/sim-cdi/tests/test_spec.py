"""The CDI spec's content, without any consumer."""

from __future__ import annotations

from pathlib import Path

import yaml

from mokka_core.model.spec import NodeSpec
from mokka_core.stage.paths import LIB_DIR
from mokka_core.stage.surface import StageContext
from mokka_sim_cdi import spec as cdi
from mokka_sim_cdi.surface import CdiSurface


def render(profile: str = "h100", gpus: int | None = None, failed: bool = False, root: str = "/srv/node") -> dict:
    node = NodeSpec(profile=profile, gpus=gpus, surfaces={"cdi": {"state": "failed" if failed else "healthy"}})
    (entry,) = CdiSurface().plan(node.resolve(), StageContext(root=Path(root)))
    assert entry.path == "var/run/cdi/nvidia.yaml"
    return yaml.safe_load(entry.data())


def test_devices_by_index_uuid_and_all() -> None:
    node = NodeSpec(profile="h100").resolve()
    spec = render()
    names = [d["name"] for d in spec["devices"]]
    assert names[-1] == "all"
    for gpu in node.gpus:
        by_index, by_uuid = (d for d in spec["devices"] if d["name"] in (str(gpu.index), gpu.uuid))
        assert by_index["containerEdits"] == by_uuid["containerEdits"] == {
            "deviceNodes": [{"path": f"/dev/nvidia{gpu.minor_number}",
                             "hostPath": f"/srv/node/dev/nvidia{gpu.minor_number}"}]}
    everything = spec["devices"][-1]["containerEdits"]["deviceNodes"]
    assert [n["path"] for n in everything] == [f"/dev/nvidia{i}" for i in range(len(node.gpus))]
    assert spec["kind"] == "nvidia.com/gpu"


def test_global_edits_mount_library_and_state_directory() -> None:
    edits = render()["containerEdits"]
    assert [n["path"] for n in edits["deviceNodes"]] == ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    mounts = {m["containerPath"]: m["hostPath"] for m in edits["mounts"]}
    assert mounts[f"/{LIB_DIR}/libnvidia-ml.so.1"] == f"/srv/node/{LIB_DIR}/libnvidia-ml.so.1"
    # the directory, not the file: an atomic rename of the state file stays visible in containers
    assert mounts[cdi.STATE_MOUNT] == f"/srv/node/{LIB_DIR}"
    assert f"{cdi.STATE_ENV}={cdi.STATE_MOUNT}/mokka-nvml.state" in edits["env"]


def test_lowest_version_carrying_what_is_used() -> None:
    assert render()["cdiVersion"] == "0.5.0"  # names starting with a digit, hostPath
    assert cdi.minimum_version({"devices": [{"name": "gpu0", "containerEdits": {}}]}) == "0.3.0"
    assert cdi.minimum_version({"devices": [], "containerEdits": {"mounts": [{"type": "bind"}]}}) == "0.4.0"
    assert cdi.minimum_version({"devices": [], "annotations": {"a": "b"}}) == "0.6.0"


def test_failed_spec_names_device_nodes_that_do_not_exist(tmp_path: Path) -> None:
    spec = render(failed=True, root=str(tmp_path))
    paths = cdi.device_host_paths(spec)
    gpu_nodes = [p for p in paths if p.rsplit("nvidia", 1)[1].isdigit()]
    assert gpu_nodes and not any(Path(p).exists() for p in gpu_nodes)
    assert all(p.startswith(str(tmp_path / "run/nvidia/driver/dev/")) for p in gpu_nodes)


def test_every_profile_renders() -> None:
    for profile in ("a100", "h100", "h200", "b200", "gb200", "gb300", "l40s", "l4", "a10g", "t4"):
        spec = render(profile)
        assert len(spec["devices"]) == 2 * len(NodeSpec(profile=profile).resolve().gpus) + 1


def test_each_mig_device_by_gpu_and_mig_index_and_by_uuid_with_its_capability_nodes(h100_partition) -> None:
    from mokka_core.stage import mig_partition

    node = NodeSpec(profile="h100", gpus=2).resolve()
    mig = h100_partition
    (entry,) = CdiSurface().plan(node, StageContext(root=Path("/srv/node"), mig=mig))
    spec = yaml.safe_load(entry.data())
    names = [d["name"] for d in spec["devices"]]
    gpu0 = node.gpus[0]
    uuids = [mig_partition.mig_uuid(gpu0.uuid, 1, 0), mig_partition.mig_uuid(gpu0.uuid, 7, 0)]
    assert names == ["0", gpu0.uuid, "0:0", uuids[0], "0:1", uuids[1], "1", node.gpus[1].uuid, "all"]
    assert all(uuid.startswith("MIG-") for uuid in uuids)
    edits = {d["name"]: d["containerEdits"] for d in spec["devices"]}
    assert edits["0:1"] == edits[uuids[1]] == {"deviceNodes": [
        {"path": "/dev/nvidia0", "hostPath": "/srv/node/dev/nvidia0"},
        {"path": "/dev/nvidia-caps/nvidia-cap66", "hostPath": "/srv/node/dev/nvidia-caps/nvidia-cap66"},
        {"path": "/dev/nvidia-caps/nvidia-cap67", "hostPath": "/srv/node/dev/nvidia-caps/nvidia-cap67"}]}
    assert [n["path"] for n in edits["0:0"]["deviceNodes"]] == [
        "/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap12", "/dev/nvidia-caps/nvidia-cap13"]
    assert [n["path"] for n in edits["all"]["deviceNodes"]] == [
        "/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap12", "/dev/nvidia-caps/nvidia-cap13",
        "/dev/nvidia-caps/nvidia-cap66", "/dev/nvidia-caps/nvidia-cap67", "/dev/nvidia1"]
