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
