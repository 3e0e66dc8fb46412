"""The package installs, registers its surface, and its CLI explains itself."""

from mokka_core.testing.sim_contract import SimContract
from mokka_sim_gpu.cli import app
from mokka_sim_gpu.surface import GpuSurface


class TestContract(SimContract):
    app = app
    surface = GpuSurface

    def test_stage_and_teardown_leave_no_residue(self, tmp_path, native_dir) -> None:  # needs the built library
        super().test_stage_and_teardown_leave_no_residue(tmp_path)


def test_stage_without_a_built_library_says_how_to_build_it(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("MOKKA_NATIVE_DIR", str(tmp_path / "nowhere"))
    result = TestContract().invoke("stage", "--root", str(tmp_path / "root"), "--profile", "h100")
    assert result.exit_code != 0
    assert "make -C native install" in str(result.exception) + result.output
    assert not (tmp_path / "root").exists() or list((tmp_path / "root").iterdir()) == []


def test_what_nvml_setters_write_survives_a_restage_and_goes_with_teardown(tmp_path, monkeypatch) -> None:
    import subprocess
    import sys

    import pytest

    from mokka_core.stage.native import native_dir
    from mokka_core.stage.paths import LIB_DIR, NVML_SETTINGS_FILE

    built = native_dir()
    if built is None:
        pytest.skip("mock libnvidia-ml not built (make -C native install)")
    monkeypatch.setenv("MOKKA_NATIVE_DIR", str(built))  # the real library: it writes the record
    root = tmp_path / "root"
    root.mkdir()
    contract = TestContract()
    assert contract.invoke("stage", "--root", str(root), "--profile", "h100").exit_code == 0
    setter = ("import ctypes; L = ctypes.CDLL('libnvidia-ml.so.1'); assert L.nvmlInit_v2() == 0; "
              "d = ctypes.c_void_p(); assert L.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(d)) == 0; "
              "assert L.nvmlDeviceSetPowerManagementLimit(d, 500000) == 0")
    env = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": str(root / LIB_DIR)}  # the record beside the staged library
    subprocess.run([sys.executable, "-c", setter], env=env, check=True, timeout=60)
    record = root / NVML_SETTINGS_FILE
    assert "device.0.power.limit_mw=500000" in record.read_text()
    record.with_name(record.name + ".tmp").write_text("mokka-nvml-settings 1\n")  # a writer killed mid-write
    assert contract.invoke("stage", "--root", str(root), "--profile", "h100").exit_code == 0
    assert "device.0.power.limit_mw=500000" in record.read_text()  # a restage keeps the node's settings
    assert contract.invoke("check", "--root", str(root), "--profile", "h100").exit_code == 0
    assert contract.invoke("teardown", "--root", str(root)).exit_code == 0
    assert list(root.iterdir()) == []
