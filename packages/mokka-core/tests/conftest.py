from pathlib import Path

import pytest

from mokka_core.schema.builtin import builtin_text


@pytest.fixture
def write_profile(tmp_path: Path):
    """Write a profile derived from the built-in h100 with ``edit`` applied to its YAML text."""

    def write(edit=lambda text: text, name: str = "profile.yaml") -> Path:
        path = tmp_path / name
        path.write_text(edit(builtin_text("h100")))
        return path

    return write
