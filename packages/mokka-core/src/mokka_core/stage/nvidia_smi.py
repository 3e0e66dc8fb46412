"""Debian's real nvidia-smi for the gpu surface's driver footprint: which branch, where it is cached, the fetch.

Debian ships the binary in its non-free section, one driver branch per suite.  It is
downloaded with a private apt configuration and unpacked with ``dpkg -x`` (nothing on the
system changes, no kernel driver package is ever fetched) into
``nvidia-smi/`` of Mokka's cache (``$MOKKA_CACHE``, default ``~/.cache/mokka``), one directory per branch.
Staging only looks in the cache (:func:`cached`); fetching is the set-up's job (``mokka fetch
nvidia-smi``, run by ``make setup``), so ``mokka run`` never waits on the network.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import MokkaError
from .paths import user_cache

#: Debian suite carrying each nvidia-smi branch (non-free).
SUITES = {"535": "bookworm", "550": "sid", "555": "experimental"}
#: Where the unpacked nvidia-smi package keeps its binary.
BINARY = "usr/lib/nvidia/current/nvidia-smi"
COMPLETE = ".complete"


class FetchFailed(MokkaError):
    """A Debian package could not be downloaded or unpacked here."""


def cache_dir() -> Path:
    return user_cache("nvidia-smi")


def closest_branch(driver_version: str) -> str:
    """The branch among :data:`SUITES` nearest the driver's major version (the older one on a tie)."""
    major = int(driver_version.split(".", 1)[0])
    return min(SUITES, key=lambda branch: (abs(int(branch) - major), int(branch)))


def cached(branch: str) -> Path | None:
    """The cached binary of ``branch``, or None (never fetches)."""
    binary = cache_dir() / branch / BINARY
    try:
        return binary if (cache_dir() / branch / COMPLETE).exists() and binary.is_file() else None
    except OSError:  # a cache this user may not read
        return None


def fetch(branch: str) -> Path:
    """The binary of ``branch``, downloading and unpacking Debian's package the first time."""
    if branch not in SUITES:
        raise FetchFailed(f"no Debian suite ships nvidia-smi {branch} (known: {', '.join(SUITES)})")
    found = cached(branch)
    if found is not None:
        return found
    cache_dir().mkdir(parents=True, exist_ok=True)
    with locked(cache_dir(), f"nvidia-smi-{branch}"):
        if cached(branch) is None:
            debian_unpack(SUITES[branch], ["nvidia-smi"], cache_dir() / branch)
    found = cached(branch)
    if found is None:
        raise FetchFailed(f"nvidia-smi {branch}: {BINARY} missing after unpacking")
    return found


def missing_message(branch: str) -> str:
    """One line: why the node has no nvidia-smi and how to get one."""
    return (f"no nvidia-smi for driver branch {branch} in {cache_dir()}: the node has no /usr/bin/nvidia-smi; "
            f"run `mokka fetch nvidia-smi {branch}` (Debian's binary, unpacked only) "
            "or name one in the profile (system.nvidia_smi)")


@contextmanager
def locked(directory: Path, name: str) -> Iterator[None]:
    import fcntl

    with open(directory / f".{name}.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def debian_unpack(suite: str, packages: list[str], dest: Path, component: str = "non-free") -> None:
    """Download Debian ``packages`` from ``suite``'s ``component`` and unpack them into ``dest`` (replaced whole)."""
    import shutil  # here and below: staging reads only the cache (cached()), and nvml-mock-ctl stages
    import subprocess
    import tempfile

    if not shutil.which("apt-get") or not shutil.which("dpkg"):
        raise FetchFailed("apt-get/dpkg not available")
    uri = "http://deb.debian.org/debian"
    sources = Path("/etc/apt/sources.list.d/debian.sources")
    if sources.exists():
        for line in sources.read_text().splitlines():
            if line.startswith("URIs:"):
                uri = line.split()[1]
                break
    with tempfile.TemporaryDirectory(prefix="mokka-apt-") as tmp:
        work = Path(tmp)
        (work / "lists" / "partial").mkdir(parents=True)
        (work / "cache" / "archives" / "partial").mkdir(parents=True)
        (work / "sources.list").write_text(
            f"deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] {uri} {suite} {component}\n"
        )
        opts = [
            "-o", f"Dir::Etc::sourcelist={work / 'sources.list'}",
            "-o", "Dir::Etc::sourceparts=-",
            "-o", f"Dir::State::Lists={work / 'lists'}",
            "-o", f"Dir::Cache={work / 'cache'}",
            "-o", "APT::Sandbox::User=root",
        ]  # fmt: skip
        try:
            subprocess.run(["apt-get", *opts, "-qq", "update"], check=True, capture_output=True, timeout=300)
            subprocess.run(
                ["apt-get", *opts, "-qq", "download", *packages],
                check=True, capture_output=True, cwd=work, timeout=600,
            )  # fmt: skip
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
            err = getattr(e, "stderr", b"") or b""
            raise FetchFailed(f"apt-get {suite}: {err.decode(errors='replace').strip()[:300]}") from e
        debs = sorted(work.glob("*.deb"))
        if len(debs) < len(packages):
            raise FetchFailed(f"apt-get {suite}: downloaded {len(debs)} of {len(packages)} packages")
        staging = Path(tempfile.mkdtemp(prefix=dest.name + ".", dir=dest.parent))
        for deb in debs:
            subprocess.run(["dpkg", "-x", str(deb), str(staging)], check=True, capture_output=True)
        (staging / COMPLETE).write_text("\n".join(d.name for d in debs) + "\n")
        if dest.exists():
            shutil.rmtree(dest)
        staging.rename(dest)
