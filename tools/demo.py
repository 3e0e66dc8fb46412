"""The README's main job: a simulated H100 node, seen by the real nvidia-smi, lspci and lsmod.

Fetches Debian's nvidia-smi (never the NVIDIA driver) and pciutils/kmod when missing, then runs
them unmodified inside ``mokka run``: the node appears at the real paths in a private mount
namespace and disappears when the command ends.  Last, ``nvml-mock-ctl`` breaks the node at
runtime (a hot GPU, a GPU fallen off the bus) and the same tools report it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from mokka_core.testing.consumers import ConsumerUnavailable, nvidia_smi

DEMO = (
    "set -e; echo '$ nvidia-smi'; nvidia-smi; echo; echo '$ nvidia-smi -L'; nvidia-smi -L; echo;"
    " echo '$ nvidia-smi topo -m'; nvidia-smi topo -m; echo;"
    " echo '$ lspci -nn -k -d 10de:'; lspci -nn -k -d 10de:; echo;"
    " echo '$ lsmod | grep nvidia'; lsmod | grep nvidia; echo;"
    " echo '$ ls -l /dev/nvidia*'; ls -l /dev/nvidia*; echo;"
    " echo '$ nvml-mock-ctl temp 0 91'; nvml-mock-ctl temp 0 91; echo;"
    " echo '$ nvidia-smi --query-gpu=index,temperature.gpu --format=csv -i 0';"
    " nvidia-smi --query-gpu=index,temperature.gpu --format=csv -i 0; echo;"
    # the last GPU falls off the bus: NVML loses it, its PCI config space reads ff
    " last=$(($(nvidia-smi -L | wc -l) - 1));"
    " bus=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader -i $last | cut -c5-);"
    " echo \"\\$ nvml-mock-ctl fail $last fallen-off-bus\"; nvml-mock-ctl fail $last fallen-off-bus; echo;"
    " echo '$ nvidia-smi -L'; nvidia-smi -L || true; echo;"
    " echo \"\\$ lspci -x -s $bus | head -2\"; lspci -x -s $bus | head -2"
)


def ensure_apt_tools() -> None:
    wanted = {"lspci": "pciutils", "lsmod": "kmod"}
    packages = [pkg for tool, pkg in wanted.items() if not shutil.which(tool)]
    if not packages:
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        sys.exit(f"demo: please install {' '.join(packages)} (needs root)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "-qq", "update"], check=True, env=env)
    subprocess.run(["apt-get", "-qq", "install", "-y", *packages], check=True, env=env)


def main() -> None:
    profile = sys.argv[1] if len(sys.argv) > 1 else "h100"
    ensure_apt_tools()
    try:
        smi = nvidia_smi("550")
    except ConsumerUnavailable as exc:
        sys.exit(f"demo: cannot fetch Debian's nvidia-smi: {exc}")
    mokka = Path(sys.executable).with_name("mokka")
    # nvidia-smi, and nvml-mock-ctl beside mokka
    env = {**os.environ, "PATH": os.pathsep.join([str(smi.parent), str(mokka.parent), os.environ.get("PATH", "")])}
    print(f"demo: a simulated {profile} node (mokka run --profile {profile} -- sh -c ...)\n", flush=True)
    done = subprocess.run([str(mokka), "run", "--profile", profile, "--", "sh", "-c", DEMO], env=env)
    sys.exit(done.returncode)


if __name__ == "__main__":
    main()
