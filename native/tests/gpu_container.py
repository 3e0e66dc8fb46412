"""A mount namespace that shows what the NVIDIA container toolkit gives a GPU container: the driver's files bound
one by one at the real paths (the library at /usr/lib/<multiarch>, nvidia-smi at /usr/bin), nvidia-persistenced's
socket at /run/nvidia-persistenced/socket, and a /dev with only the device nodes given. Nothing else of a driver
root is there, so no state file is beside the library. Needs root and `unshare -m`.
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sysconfig
from pathlib import Path

from conftest import consumers

MULTIARCH = sysconfig.get_config_var("MULTIARCH") or f"{os.uname().machine}-linux-gnu"
LIB_DIR = f"/usr/lib/{MULTIARCH}"


def require_namespaces() -> None:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        consumers.missing("needs root and `unshare -m` for a private mount namespace")


def setup_script(work: Path, lib_dir: Path | None, *, smi: Path | None = None, socket: Path | None = None,
                 minors: list[int] | None = None) -> str:
    """Shell lines that make the namespace a GPU container's view. ``lib_dir``: the library bound at the real
    path (None: none); ``minors``: the /dev/nvidia<minor> given (with nvidiactl; None: /dev stays the host's)."""
    q = shlex.quote
    lines = [f"W={q(str(work))}", 'mkdir -p "$W/lu" "$W/lw" "$W/bu" "$W/bw"; : > "$W/null"']
    if lib_dir is not None:
        library = (lib_dir / "libnvidia-ml.so.1").resolve()
        lines += [f'mount -t overlay overlay -o lowerdir={LIB_DIR},upperdir="$W/lu",workdir="$W/lw" {LIB_DIR}',
                  f": > {LIB_DIR}/{library.name}", f"mount --bind {q(str(library))} {LIB_DIR}/{library.name}",
                  f"ln -sf {library.name} {LIB_DIR}/libnvidia-ml.so.1"]
    if smi is not None:
        lines += ['mount -t overlay overlay -o lowerdir=/usr/bin,upperdir="$W/bu",workdir="$W/bw" /usr/bin',
                  ": > /usr/bin/nvidia-smi", f"mount --bind {q(str(smi))} /usr/bin/nvidia-smi"]
    if socket is not None:
        lines += ["mount -t tmpfs none /run", "mkdir -p /run/nvidia-persistenced",
                  ": > /run/nvidia-persistenced/socket",
                  f"mount --bind {q(str(socket))} /run/nvidia-persistenced/socket"]
    if minors is not None:
        lines += ['mount --bind /dev/null "$W/null"', "mount -t tmpfs -o mode=755 none /dev",
                  ': > /dev/null; mount --bind "$W/null" /dev/null', "mknod -m 666 /dev/nvidiactl c 195 255"]
        lines += [f"mknod -m 666 /dev/nvidia{minor} c 195 {minor}" for minor in minors]
    return "\n".join(lines) + "\n"


def env(lib_dir: Path) -> dict[str, str]:
    """The environment of a process in the container: the library found at the real path, no state given."""
    out = {k: v for k, v in os.environ.items() if not k.startswith("MOKKA_NVML")}
    out["LD_LIBRARY_PATH"] = LIB_DIR
    preload = os.environ.get("MOKKA_TEST_LD_PRELOAD")  # the ASan runtime for the sanitizer run
    if preload:
        out["LD_PRELOAD"] = preload
    return out


def run(script: str, environment: dict[str, str], timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-ec", script], env=environment,
                          capture_output=True, text=True, timeout=timeout)


def start(script: str, environment: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-ec", script], env=environment,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
