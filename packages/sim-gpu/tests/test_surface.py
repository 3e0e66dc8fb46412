"""What the gpu surface stages in each state, and that it all comes and goes as one."""

from __future__ import annotations

import logging
import os
import re
import stat
from pathlib import Path

import pytest

from mokka_core.errors import MokkaError
from mokka_core.model.spec import NodeSpec
from mokka_core.schema.builtin import builtin_text
from mokka_core.stage import nvidia_smi, paths, procdevices
from mokka_core.stage.mig_partition import ComputeInstance, GpuInstance
from mokka_core.stage.store import STATE_DIR
from mokka_core.stage.surface import CharDevice, Copy, StageContext
from mokka_sim_gpu.library import built_library
from mokka_sim_gpu.surface import GpuSurface


def test_healthy_h100_footprint(staged) -> None:
    root = staged("h100")
    lib = root / paths.LIB_DIR
    assert os.readlink(lib / "libnvidia-ml.so.1") == "libnvidia-ml.so.550.163.01"
    assert os.readlink(lib / "libnvidia-ml.so") == "libnvidia-ml.so.1"
    assert (lib / "libnvidia-ml.so.550.163.01").read_bytes().startswith(b"\x7fELF")
    assert (root / paths.NVML_STATE_FILE).read_text().startswith("mokka-nvml-state 1\n")
    assert sorted(p.name for p in (root / "dev").iterdir()) == sorted(
        [f"nvidia{i}" for i in range(8)] + ["nvidiactl", "nvidia-modeset", "nvidia-uvm", "nvidia-uvm-tools"]
    )
    proc = root / "proc/driver/nvidia"
    assert (proc / "version").read_text().split()[7] == "550.163.01"
    assert sorted(p.name for p in (proc / "gpus").iterdir())[0] == "0000:1b:00.0"
    assert (proc / "registry").read_text() == 'Binary: ""\n'
    module = root / "sys/module/nvidia"
    assert (module / "version").read_text() == "550.163.01\n"
    assert (module / "initstate").read_text() == "live\n"
    assert sorted(p.name for p in (module / "holders").iterdir()) == ["nvidia_modeset", "nvidia_peermem", "nvidia_uvm"]
    assert (module / "holders/nvidia_uvm").resolve() == (root / "sys/module/nvidia_uvm").resolve()
    assert (module / "parameters/NVreg_EnableGpuFirmware").read_text() == "18\n"
    assert (root / "proc/modules").read_text().count(" Live ") == 4 + 1 + 4  # nvidia_peermem, the HCAs' mlx5_ib, ...
    assert (root / "sys/module/ib_core/refcnt").read_text() == "3\n"
    assert (root / "sys/module/ib_core/taint").read_text() == "\n"
    assert not (root / "sys/module/mlx5_core/version").exists()  # in tree: no MODULE_VERSION


def test_the_drivers_other_libraries_are_installed_with_their_soname_links(staged) -> None:
    root = staged("b200")  # 580.105.08 (a driver whose version the stub was not built for)
    lib = root / paths.LIB_DIR
    assert os.readlink(lib / "libcuda.so.1") == "libcuda.so.580.105.08"
    assert os.readlink(lib / "libnvidia-nvvm.so.4") == "libnvidia-nvvm.so.580.105.08"
    assert (lib / "libcuda.so.580.105.08").read_bytes().startswith(b"\x7fELF")
    # a library whose soname is its versioned name carries the node's version there, and has no link
    assert b"\0libnvidia-gpucomp.so.580.105.08\0" in (lib / "libnvidia-gpucomp.so.580.105.08").read_bytes()
    assert sorted(p.name for p in lib.glob("libnvidia-gpucomp*")) == ["libnvidia-gpucomp.so.580.105.08"]


def test_profile_driver_version_names_the_library(staged) -> None:
    root = staged("b200")  # 580.105.08, served by the same build
    assert os.readlink(root / paths.LIB_DIR / "libnvidia-ml.so.1") == "libnvidia-ml.so.580.105.08"
    assert (root / "sys/module/nvidia/version").read_text() == "580.105.08\n"


def test_device_numbers(make_node, native_dir: Path) -> None:
    plan = GpuSurface().plan(make_node("h100", gpus=2), StageContext(root=Path("/"), native_dir=native_dir))
    devices = {e.path: (e.major, e.minor) for e in plan if isinstance(e, CharDevice)}
    assert devices == {
        "dev/nvidia0": (195, 0), "dev/nvidia1": (195, 1), "dev/nvidiactl": (195, 255),
        "dev/nvidia-modeset": (195, 254), "dev/nvidia-uvm": (509, 0), "dev/nvidia-uvm-tools": (509, 1),
    }


def char_section(text: str) -> dict[str, int]:
    """name -> major in a /proc/devices text, read as nv-dev-create.sh and the container toolkit read it."""
    lines = text.split("\n\nBlock devices:")[0].splitlines()[1:]
    return {line.split()[1]: int(line.split()[0]) for line in lines}


@pytest.mark.parametrize(("driver", "names"), [
    ("550.163.01", ["nvidia", "nvidiactl", "nvidia-caps", "nvidia-uvm"]),
    ("535.247.01", ["nvidia-frontend", "nvidia-caps", "nvidia-uvm"]),  # before 550.40: one frontend region
])
def test_proc_devices_names_the_majors_of_the_staged_device_nodes(native_dir: Path, tmp_path: Path, driver: str,
                                                                  names: list[str]) -> None:
    profile = tmp_path / "mine.yaml"
    profile.write_text(builtin_text("h100").replace('driver_version: "550.163.01"', f'driver_version: "{driver}"'))
    imex = (procdevices.host_majors().imex_channels, "nvidia-caps-imex-channels")  # the imex surface's line
    ctx = StageContext(root=Path("/"), native_dir=native_dir, char_majors=(imex,))
    plan = GpuSurface().plan(NodeSpec(profile_file=profile, gpus=2).resolve(), ctx)
    (text,) = [e.content for e in plan if e.path == "proc/devices"]
    assert isinstance(text, str)
    host = Path("/proc/devices").read_text()
    assert all(line in text for line in host.splitlines() if "nvidia" not in line)  # the host's drivers stay
    majors = char_section(text)
    assert sorted(name for name in majors if name.startswith("nvidia")) == sorted([*names, imex[1]])
    assert list(majors.values()) == sorted(majors.values())  # in major order, as the kernel prints them
    devices = {e.path: e.major for e in plan if isinstance(e, CharDevice)}
    gpu_region = "nvidia" if "nvidia" in majors else "nvidia-frontend"
    assert devices["dev/nvidia0"] == devices["dev/nvidia1"] == majors[gpu_region] == 195
    assert devices["dev/nvidiactl"] == majors.get("nvidiactl", majors[gpu_region])
    assert devices["dev/nvidia-uvm"] == devices["dev/nvidia-uvm-tools"] == majors["nvidia-uvm"]
    partition = {0: (GpuInstance(id=1, row=0, start=0, compute=(ComputeInstance(0, 0, 0, 0),)),)}
    partitioned = GpuSurface().plan(NodeSpec(profile_file=profile, gpus=2).resolve(), ctx._replace(mig=partition))
    caps = [e for e in partitioned if isinstance(e, CharDevice) and e.path.startswith("dev/nvidia-caps/")]
    assert len(caps) == 4 and {e.major for e in caps} == {majors["nvidia-caps"]}


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_device_nodes_are_character_devices(staged) -> None:
    st = (staged("t4") / "dev/nvidiactl").stat()
    assert stat.S_ISCHR(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) == (195, 255)


def test_failed_stages_only_the_libraries_and_state_file(staged) -> None:
    root = staged("h100", gpu={"state": "failed"})
    staged_files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir())
    expected = [f"{paths.LIB_DIR}/{name}" for name in
                ("libnvidia-ml.so", "libnvidia-ml.so.1", "libnvidia-ml.so.550.163.01", "libcuda.so.1",
                 "libcuda.so.550.163.01", "libnvidia-nvvm.so.4", "libnvidia-nvvm.so.550.163.01",
                 "libnvidia-gpucomp.so.550.163.01")]
    expected += [paths.NVML_STATE_FILE, "usr/bin/nvidia-smi"]
    module_files = [f for f in staged_files if f.startswith("lib/modules/")]
    assert sorted(Path(f).name for f in module_files) == [
        "modules.alias", "modules.alias.bin", "modules.builtin", "modules.builtin.alias.bin", "modules.builtin.bin",
        "modules.builtin.modinfo", "modules.dep", "modules.dep.bin", "modules.devname", "modules.softdep",
        "modules.symbols", "modules.symbols.bin",
        "nvidia-drm.ko", "nvidia-modeset.ko", "nvidia-uvm.ko", "nvidia.ko",
    ]
    rest = [f for f in staged_files if not f.startswith((STATE_DIR, "lib/modules/", "sys/module/", "proc/modules"))]
    assert rest == sorted(expected)
    # no NVIDIA module loaded; the HCAs' InfiniBand stack is, as the kernel loaded it without the driver
    listed = [line.split()[0] for line in (root / "proc/modules").read_text().splitlines()]
    assert listed == ["mlx5_ib", "ib_uverbs", "ib_core", "mlx5_core"]
    assert sorted(p.name for p in (root / "sys/module").iterdir()) == sorted(listed)


def test_disabled_stages_nothing(make_node, native_dir: Path) -> None:
    state = make_node("h100", gpu={"enabled": False})
    assert GpuSurface().plan(state, StageContext(root=Path("/"), native_dir=native_dir)) == []


def test_missing_library_is_a_clear_error(make_node, tmp_path: Path) -> None:
    with pytest.raises(MokkaError, match="make -C native install"):
        GpuSurface().plan(make_node("t4"), StageContext(root=tmp_path, native_dir=None))
    (tmp_path / "empty").mkdir()
    with pytest.raises(MokkaError, match=r"no libnvidia-ml\.so"):
        built_library(tmp_path / "empty", "550.163.01")


def test_library_copy_comes_from_the_native_dir(make_node, native_dir: Path) -> None:
    plan = GpuSurface().plan(make_node("t4"), StageContext(root=Path("/"), native_dir=native_dir))
    copies = [e for e in plan if isinstance(e, Copy) and e.path.startswith(paths.LIB_DIR)]
    assert [c.source for c in copies] == [native_dir / "libnvidia-ml.so.550.163.01",
                                          native_dir / "driver-libs/libcuda.so",
                                          native_dir / "driver-libs/libnvidia-nvvm.so"]  # gpucomp: a File


def test_nvidia_smi_is_debians_of_the_nearest_branch(make_node, native_dir: Path, nvidia_smi_cache: Path) -> None:
    ctx = StageContext(root=Path("/"), native_dir=native_dir)
    smi = [e for e in GpuSurface().plan(make_node("h100"), ctx) if e.path == "usr/bin/nvidia-smi"]
    assert smi == [Copy("usr/bin/nvidia-smi", nvidia_smi_cache / "550" / nvidia_smi.BINARY, mode=0o755)]
    assert [nvidia_smi.closest_branch(v) for v in ("535.230.02", "550.163.01", "570.133.20", "580.65.06", "470.1")] \
        == ["535", "550", "555", "555", "535"]


def test_without_nvidia_smi_staging_says_how_to_get_one(make_node, native_dir: Path, nvidia_smi_cache: Path,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    """b200's driver (570) is nearest branch 555, which the cache lacks: no binary, one line saying why."""
    ctx = StageContext(root=Path("/"), native_dir=native_dir)
    with caplog.at_level(logging.WARNING):
        plan = GpuSurface().plan(make_node("b200"), ctx)
    assert not any(e.path == "usr/bin/nvidia-smi" for e in plan)
    assert [r.getMessage() for r in caplog.records] == [
        f"gpu: no nvidia-smi for driver branch 555 in {nvidia_smi_cache}: the node has no /usr/bin/nvidia-smi; "
        "run `mokka fetch nvidia-smi 555` (Debian's binary, unpacked only) or name one in the profile "
        "(system.nvidia_smi)"]
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        GpuSurface().plan(make_node("b200"), ctx)  # nvml-mock-ctl re-plans on every call: said once
    assert caplog.records == []


def test_profile_names_its_own_nvidia_smi(native_dir: Path, tmp_path: Path) -> None:
    own = tmp_path / "my-nvidia-smi"
    own.write_text("")
    profile = tmp_path / "mine.yaml"
    text = builtin_text("h100").replace('  driver_version: "550.163.01"\n',
                                        f'  driver_version: "550.163.01"\n  nvidia_smi: {own}\n')
    profile.write_text(text)
    ctx = StageContext(root=Path("/"), native_dir=native_dir)
    plan = GpuSurface().plan(NodeSpec(profile_file=profile).resolve(), ctx)
    assert Copy("usr/bin/nvidia-smi", own, mode=0o755) in plan
    own.unlink()
    with pytest.raises(MokkaError, match=re.escape(f"system.nvidia_smi: no such file: {own}")):
        GpuSurface().plan(NodeSpec(profile_file=profile).resolve(), ctx)
    profile.write_text(text.replace(f"nvidia_smi: {own}", "nvidia_smi: relative/nvidia-smi"))
    with pytest.raises(MokkaError, match=r"system\.nvidia_smi"):
        NodeSpec(profile_file=profile).resolve()
