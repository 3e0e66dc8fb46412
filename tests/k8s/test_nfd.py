"""node-feature-discovery's nfd-worker, one-shot and unpublished, on every profile.

nfd-worker reads /sys/bus/pci/devices, /sys/devices/system/node, DMI and /proc/modules with plain
syscalls (no libc to preload), so what it labels is what the mount namespace shows at the real paths.
It needs a kubeconfig even with -no-publish: one pointing at a dead loopback port is enough.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from boards import BOARDS, PROFILES
from conftest import mokka_run

from mokka_core.schema.builtin import load_builtin

PREFIX = "feature.node.kubernetes.io/"
KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- name: dead
  cluster: {server: "https://127.0.0.1:9"}
contexts:
- name: dead
  context: {cluster: dead, user: nobody}
current-context: dead
users:
- name: nobody
  user: {token: none}
"""


#: A worker config whose custom rules turn the features NFD discovers but does not label by default
#: (loaded modules) into labels, as a cluster's NodeFeatureRule would.
RULES = """sources:
  custom:
    - name: nvidia-kernel-module
      labels: {"kernel-loadedmodule.nvidia": "true"}
      matchFeatures:
        - feature: kernel.loadedmodule
          matchExpressions: {nvidia: {op: Exists}}
"""


#: A rule that labels the node when DMI (sys_vendor, product_name) names the expected machine.
DMI_RULE = """sources:
  custom:
    - name: machine
      labels: {{"system-dmiid.machine": "true"}}
      matchFeatures:
        - feature: system.dmiid
          matchExpressions:
            sys_vendor: {{op: In, value: ["{vendor}"]}}
            product_name: {{op: In, value: ["{product}"]}}
"""


def nfd_labels(nfd_worker: Path, profile: str, scratch: Path, config: str = "") -> dict[str, str]:
    kubeconfig = scratch / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    (scratch / "nfd-worker.conf").write_text(config)
    done = mokka_run(profile, "env", "NODE_NAME=mokka-node", str(nfd_worker), "-oneshot", "-no-publish", "-v=1",
                     f"-config={scratch / 'nfd-worker.conf'}", f"-kubeconfig={kubeconfig}", "-metrics=0",
                     "-grpc-health=0")
    assert done.returncode == 0, done.stderr[-3000:]
    block = re.search(r'"feature discovery completed" labels=<\n(.*?)\n\s*>', done.stderr, re.S)
    assert block, done.stderr[-3000:]
    labels = {}
    for line in block.group(1).splitlines():
        key, _, value = line.strip().partition(": ")
        labels[key.removeprefix(PREFIX)] = value.strip('"')
    return labels


@pytest.mark.consumer
@pytest.mark.parametrize("profile", PROFILES)
def test_nfd_labels_the_gpus_and_hcas(nfd_worker: Path, profile: str, tmp_path: Path) -> None:
    labels = nfd_labels(nfd_worker, profile, tmp_path)
    nvidia = {key: value for key, value in labels.items() if key.startswith("pci-") and "_10de" in key}
    assert nvidia.get(f"pci-{BOARDS[profile].pci_class}_10de.present") == "true", labels
    assert set(nvidia) <= {f"pci-{BOARDS[profile].pci_class}_10de.present",
                           f"pci-{BOARDS[profile].pci_class}_10de.sriov.capable"}, nvidia
    assert (labels.get("rdma.capable") == "true") == BOARDS[profile].rdma, labels  # built-in rule: a 15b3 PCI device


@pytest.mark.consumer
@pytest.mark.parametrize("profile", PROFILES)
def test_nfd_sees_the_machine(nfd_worker: Path, profile: str, tmp_path: Path) -> None:
    """NUMA and SR-IOV as NFD labels them by default; the DMI identity through a rule matching the machine's."""
    board, dmi = BOARDS[profile], load_builtin(profile).system.dmi
    labels = nfd_labels(nfd_worker, profile, tmp_path, DMI_RULE.format(vendor=dmi.sys_vendor, product=dmi.product_name))
    assert (labels.get("memory-numa") == "true") == board.numa, labels
    assert (labels.get(f"pci-{board.pci_class}_10de.sriov.capable") == "true") == board.sriov, labels
    assert labels.get("system-dmiid.machine") == "true", labels


@pytest.mark.consumer
def test_nfd_sees_the_loaded_nvidia_module(nfd_worker: Path, tmp_path: Path) -> None:
    """On a kernel without module support too: mokka run answers the reads of /proc/modules (mokka-proc-files)."""
    labels = nfd_labels(nfd_worker, "h100", tmp_path, RULES)
    assert labels.get("kernel-loadedmodule.nvidia") == "true", labels
