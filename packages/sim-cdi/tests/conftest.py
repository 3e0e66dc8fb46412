"""Fixtures for the consumer tests: Debian's CDI Go package built into a checker, runc and busybox."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from mokka_core.testing import consumers
from mokka_core.testing.consumers import cache_dir, missing

CHECKER_SOURCE = Path(__file__).parent / "cdi_check" / "main.go"
GO_CDI_PACKAGE = "golang-github-container-orchestrated-devices-container-device-interface-dev"
GO_CDI_SOURCE = Path("/usr/share/gocode/src/github.com/container-orchestrated-devices/container-device-interface")


@pytest.fixture(scope="session")
def cdi_check() -> Path:
    """The checker binary, built offline against Debian's CDI package; cached by source hash."""
    consumers.ensure_apt(["golang-go", GO_CDI_PACKAGE], present=bool(shutil.which("go")) and GO_CDI_SOURCE.is_dir())
    digest = hashlib.sha256(CHECKER_SOURCE.read_bytes()).hexdigest()[:16]
    binary = cache_dir() / f"cdi-check-{digest}"
    if binary.exists():
        return binary
    work = cache_dir() / f".cdi-check-build-{os.getpid()}"
    work.mkdir(parents=True, exist_ok=True)
    try:
        shutil.copy(CHECKER_SOURCE, work / "main.go")
        env = {**os.environ, "GOPATH": "/usr/share/gocode", "GO111MODULE": "off", "GOFLAGS": "",
               "GOCACHE": str(work / "gocache"), "HOME": str(work)}
        result = subprocess.run(["go", "build", "-o", str(work / "cdi-check"), "main.go"], cwd=work, env=env,
                                capture_output=True, text=True, timeout=600)
        if result.returncode != 0:
            missing(f"building the CDI checker failed: {result.stderr.strip()[-500:]}")
        os.replace(work / "cdi-check", binary)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return binary


@pytest.fixture(scope="session")
def runc() -> Path:
    if os.geteuid() != 0:
        missing("runc containers need root here")
    present = bool(shutil.which("runc")) and Path("/bin/busybox").exists()
    consumers.ensure_apt(["runc", "busybox-static"], present=present)
    found = shutil.which("runc")
    if not found:
        missing("runc not found after installing it")
    return Path(found)
