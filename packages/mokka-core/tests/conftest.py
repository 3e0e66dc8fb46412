from pathlib import Path

import pytest

from mokka_core.schema.builtin import builtin_text


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A node's root that already holds a host file (``etc/hostname``): what staging and teardown must
    leave as it was.  Modules whose tests start from a node file define their own."""
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "hostname").write_text("host\n")
    return root


@pytest.fixture
def write_profile(tmp_path: Path):
    """Write a profile derived from the built-in h100 with ``edit`` applied to its YAML text."""

    def write(edit=lambda text: text, name: str = "profile.yaml") -> Path:
        path = tmp_path / name
        path.write_text(edit(builtin_text("h100")))
        return path

    return write


@pytest.fixture
def whole_node() -> None:
    """A test of a whole node (the real surfaces staged): skipped where only mokka-core is installed
    (`tox -e mokka-core`), a failure in `tox -e e2e`, which installs every package and runs it."""
    import os

    from mokka_core.stage.surface import discover

    missing = {"gpu", "pci", "nvlink", "fabricmanager"} - set(discover())
    if missing:
        reason = f"needs the surfaces {', '.join(sorted(missing))} installed (tox -e e2e runs it)"
        if os.environ.get("MOKKA_E2E") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
