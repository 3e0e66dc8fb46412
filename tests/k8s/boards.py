"""What the real boards of the built-in profiles report: the oracle of the Kubernetes consumer tests.

Names, framebuffer totals, MIG and fabric come from the real ``nvidia-smi -q -x`` captures
(``reference/captures/qx-<profile>.xml``: ``product_name``, ``fb_memory_usage/total``,
``mig_mode/current_mig``, ``fabric/state``; ``test_boards.py`` checks this table against them where
they are present). H200, L4 and A10G have no capture: their names and totals are what public
nvidia-smi output of those boards shows (``NVIDIA H200`` 143771 MiB, ``NVIDIA L4`` 23034 MiB,
``NVIDIA A10G`` 23028 MiB), the rest from NVIDIA's specifications (MIG on H200, none on L4/A10G).
Compute capabilities come from NVIDIA's CUDA GPU table (GB300 is 10.3); PCI classes from
``lspci -nn`` on real nodes (every one of these boards enumerates as a 3D controller).
The machines: DGX A100/H100/H200/B200 and the L40S server are two-socket, a GB200/GB300 tray has two
Grace CPUs, a g4dn.xlarge (T4), g6.xlarge (L4) and g5.xlarge (A10G) one NUMA node; SR-IOV is on the
vGPU-capable boards (A100, H100, H200, B200, L40S), not on the T4 (Turing's vGPU is mediated, without
VFs) nor, in these profiles, on GB200/GB300 or the single-GPU cloud VMs (L4, A10G).
"""

from __future__ import annotations

from dataclasses import dataclass

PROFILES = ("a100", "h100", "h200", "b200", "gb200", "gb300", "l40s", "l4", "a10g", "t4")

#: nvmlDeviceArchitecture_t values (nvml.h NVML_DEVICE_ARCH_*)
ARCH_TURING, ARCH_AMPERE, ARCH_ADA, ARCH_HOPPER, ARCH_BLACKWELL = 6, 7, 8, 9, 10


@dataclass(frozen=True)
class Board:
    name: str
    fb_total_mib: int
    compute_capability: tuple[int, int]
    architecture: int
    mig_capable: bool
    fabric: bool  # fabric/state is a real state (Completed), not N/A
    rdma: bool  # the machine has Mellanox InfiniBand HCAs (DGX systems, GB200/GB300 trays)
    numa: bool  # the machine has more than one NUMA node
    sriov: bool  # the GPU function has the SR-IOV capability
    pci_class: str = "0302"


BOARDS = {
    "a100": Board("NVIDIA A100-SXM4-40GB", 40960, (8, 0), ARCH_AMPERE, mig_capable=True, fabric=False, rdma=True,
                  numa=True, sriov=True),
    "h100": Board("NVIDIA H100 80GB HBM3", 81559, (9, 0), ARCH_HOPPER, mig_capable=True, fabric=True, rdma=True,
                  numa=True, sriov=True),
    "h200": Board("NVIDIA H200", 143771, (9, 0), ARCH_HOPPER, mig_capable=True, fabric=True, rdma=True,
                  numa=True, sriov=True),
    "b200": Board("NVIDIA B200", 183359, (10, 0), ARCH_BLACKWELL, mig_capable=True, fabric=True, rdma=True,
                  numa=True, sriov=True),
    "gb200": Board("NVIDIA GB200", 189471, (10, 0), ARCH_BLACKWELL, mig_capable=True, fabric=True, rdma=True,
                   numa=True, sriov=False),
    "gb300": Board("NVIDIA GB300", 284208, (10, 3), ARCH_BLACKWELL, mig_capable=True, fabric=True, rdma=True,
                   numa=True, sriov=False),
    "l40s": Board("NVIDIA L40S", 46068, (8, 9), ARCH_ADA, mig_capable=False, fabric=False, rdma=False,
                  numa=True, sriov=True),
    "l4": Board("NVIDIA L4", 23034, (8, 9), ARCH_ADA, mig_capable=False, fabric=False, rdma=False,
                numa=False, sriov=False),
    "a10g": Board("NVIDIA A10G", 23028, (8, 6), ARCH_AMPERE, mig_capable=False, fabric=False, rdma=False,
                  numa=False, sriov=False),
    "t4": Board("Tesla T4", 15360, (7, 5), ARCH_TURING, mig_capable=False, fabric=False, rdma=False,
                numa=False, sriov=False),
}
