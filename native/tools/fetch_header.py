#!/usr/bin/env python3
"""Fetch nvml.h from PyPI's NVML header wheel (never committed; cached in build/).

CUDA 12 headers come in ``nvidia-nvml-dev-cu12`` (12.x), CUDA 13 ones in ``nvidia-nvml-dev`` (13.x);
each wheel keeps the header under its own path.  Uses pip when the interpreter has it (honours the
user's pip configuration, proxies, mirrors); otherwise reads PyPI's simple index with urllib and
checks the wheel's sha256.
  fetch_header.py <version> <dest-dir>    ->  <dest-dir>/nvml.h
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path

#: CUDA major version -> (PyPI package, the header's path inside its wheel)
WHEELS = {
    "12": ("nvidia-nvml-dev-cu12", "nvidia/nvml_dev/include/nvml.h"),
    "13": ("nvidia-nvml-dev", "nvidia/cu13/include/nvml.h"),
}


def with_pip(package: str, version: str, dest: Path) -> Path | None:
    if importlib.util.find_spec("pip") is None:
        return None
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--disable-pip-version-check",
           "--only-binary=:all:", "--platform", "manylinux2014_x86_64", "--dest", str(dest), f"{package}=={version}"]
    if subprocess.run(cmd).returncode != 0:
        return None
    wheels = sorted(dest.glob(f"{package.replace('-', '_')}-{version}-*.whl"))
    return wheels[0] if wheels else None


def with_urllib(package: str, version: str, dest: Path) -> Path:
    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
    page = urllib.request.urlopen(f"{index}/{package}/", timeout=60).read().decode()
    links = [h for h in re.findall(r'href="([^"]+)"', page) if f"-{version}-" in h and "x86_64" in h]
    if not links:
        raise SystemExit(f"fetch_header: no x86_64 wheel of {package}=={version} in {index}")
    url, _, fragment = links[0].partition("#")
    name = url.rsplit("/", 1)[-1]
    data = urllib.request.urlopen(url, timeout=300).read()
    if fragment.startswith("sha256=") and hashlib.sha256(data).hexdigest() != fragment[7:]:
        raise SystemExit(f"fetch_header: sha256 mismatch for {name}")
    path = dest / name
    path.write_bytes(data)
    return path


def main() -> int:
    version, dest = sys.argv[1], Path(sys.argv[2])
    major = version.split(".")[0]
    if major not in WHEELS:
        raise SystemExit(f"fetch_header: no nvml.h wheel known for CUDA {major} (known: {', '.join(WHEELS)})")
    package, member = WHEELS[major]
    dest.mkdir(parents=True, exist_ok=True)
    wheel = with_pip(package, version, dest) or with_urllib(package, version, dest)
    with zipfile.ZipFile(wheel) as z:
        (dest / "nvml.h").write_bytes(z.read(member))
    print(f"fetch_header: {dest / 'nvml.h'} from {wheel.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
