"""The package installs, registers its surface, and its CLI explains itself."""

from mokka_core.testing.examples import run_example, typer_examples
from mokka_core.testing.sim_contract import SimContract
from mokka_sim_nvlink.cli import app
from mokka_sim_nvlink.surface import NvlinkSurface


class TestContract(SimContract):
    app = app
    surface = NvlinkSurface
    # NVLink is NVML-only: without the gpu surface's NVML view, check has nothing to compare
    checks_alone = False
    own_examples = frozenset({"links"})


def test_the_links_example_runs(tmp_path) -> None:
    run_example(typer_examples(app)[("links",)], tmp_path / "root", tmp_path)


def test_check_alone_says_the_nvml_view_is_missing(tmp_path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    contract = TestContract()
    assert contract.invoke("stage", "--root", str(root), "--profile", "h100").exit_code == 0
    check = contract.invoke("check", "--root", str(root), "--profile", "h100")
    assert check.exit_code == 1
    assert "mokka-nvml.state is missing (the gpu surface stages it)" in check.output
