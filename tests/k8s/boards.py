"""What the real boards of the built-in profiles report: the oracle of the Kubernetes consumer tests.

Names, framebuffer totals, MIG and fabric come from the real ``nvidia-smi -q -x`` captures
(``reference/captures/qx-<profile>.xml``: ``product_name``, ``fb_memory_usage/total``,
``mig_mode/current_mig``, ``fabric/state``; ``test_boards.py`` checks this table against them where
they are present). H200, L4 and A10G have no capture: their names and totals are what public
nvidia-smi output of those boards shows (``NVIDIA H200`` 143771 MiB, ``NVIDIA L4`` 23034 MiB,
``NVIDIA A10G`` 23028 MiB), the rest from NVIDIA's specifications (MIG on H200, none on L4/A10G).
Compute capabilities come from NVIDIA's CUDA GPU table (GB300 is 10.3); PCI classes from
``lspci -nn`` on real nodes (every one of these boards enumerates as a 3D controller).
PCI device and subsystem ids, BAR1 sizes, brands, architectures and addressing modes come from the
captures (``pci/pci_device_id``, ``pci/pci_sub_system_id``, ``bar1_memory_usage/total``, ``product_brand``,
``product_architecture``, ``addressing_mode``; ``test_boards.py`` checks them); H200 (0x2335), L4
(0x27b8) and A10G (0x2237) from the PCI ID repository, their BAR1 sizes are not public. BAR0 is the
16 MiB 32-bit register window ``lspci -v`` shows on NVIDIA datacenter boards up to Hopper/Ada
(Blackwell's is not public). NVSwitches on the PCI bus: DGX A100 six (0x1af1), DGX H100 and HGX H200
four (0x22a3); a GB200/GB300 compute tray none (its switches sit in the NVLink switch trays); DGX
B200's are not public. go-nvlib's IsFabricAttached needs a Completed state and a non-zero cluster UUID:
only the GB200/GB300 captures have one. MIG GPU-instance profiles are the MIG user guide's
(A100-SXM4-40GB, H100-SXM5 80GB, H200 141GB, B200 180GB). For the GB200 the guide gives only "186GB":
its names are what go-nvlib forms for the capture's 189471 MiB (memory fractions 1/8, 2/8, 4/8, 8/8 of
186 GB); the GB300's are not published.
The machines: DGX A100/H100/H200/B200 and the L40S server are two-socket, a GB200/GB300 tray has two
Grace CPUs, a g4dn.xlarge (T4), g6.xlarge (L4) and g5.xlarge (A10G) one NUMA node; SR-IOV is on the
vGPU-capable boards (A100, H100, H200, B200, L40S), not on the T4 (Turing's vGPU is mediated, without
VFs) nor, in these profiles, on GB200/GB300 or the single-GPU cloud VMs (L4, A10G).
"""

from __future__ import annotations

from dataclasses import dataclass

#: the CUDA version a driver branch reports (nvmlSystemGetCudaDriverVersion; NVIDIA's CUDA toolkit release notes,
#: "CUDA Toolkit and Corresponding Driver Versions"; test_boards.py checks it against the captures' pairs)
CUDA_OF_BRANCH = {535: (12, 2), 550: (12, 4), 555: (12, 5), 560: (12, 6), 565: (12, 7), 570: (12, 8), 575: (12, 9),
                  580: (13, 0), 590: (13, 1), 595: (13, 2)}

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
    pci_device: int = 0
    pci_subsystem: int | None = None  # NVML's packing: subsystem device << 16 | subsystem vendor; None: no capture
    bar1_mib: int | None = None  # None: not public
    bar0_mib: int | None = 16
    brand: str = "Nvidia"  # go-nvlib's GetBrandAsString of NVML_BRAND_NVIDIA (product_brand "NVIDIA")
    architecture_name: str = ""  # go-nvlib's GetArchitectureAsString (product_architecture)
    addressing_mode: str | None = None  # go-nvlib's GetAddressingModeAsString; None: no capture
    nvswitches: tuple[int, int] | None = (0, 0)  # (count, PCI device id) on the PCI bus; None: not public
    fabric_attached: bool = False
    mig_profiles: tuple[str, ...] = ()  # GPU-instance profiles as go-nvlib names them
    pci_class: str = "0302"


BOARDS = {
    "a100": Board("NVIDIA A100-SXM4-40GB", 40960, (8, 0), ARCH_AMPERE, mig_capable=True, fabric=False, rdma=True,
                  numa=True, sriov=True, pci_device=0x20B0, pci_subsystem=0x134F10DE, bar1_mib=65536,
                  architecture_name="Ampere", addressing_mode="HMM", nvswitches=(6, 0x1AF1),
                  mig_profiles=("1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb")),
    "h100": Board("NVIDIA H100 80GB HBM3", 81559, (9, 0), ARCH_HOPPER, mig_capable=True, fabric=True, rdma=True,
                  numa=True, sriov=True, pci_device=0x2330, pci_subsystem=0x16C110DE, bar1_mib=131072,
                  architecture_name="Hopper", addressing_mode="HMM", nvswitches=(4, 0x22A3),
                  mig_profiles=("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")),
    "h200": Board("NVIDIA H200", 143771, (9, 0), ARCH_HOPPER, mig_capable=True, fabric=True, rdma=True,
                  numa=True, sriov=True, pci_device=0x2335, architecture_name="Hopper", nvswitches=(4, 0x22A3),
                  mig_profiles=("1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb")),
    "b200": Board("NVIDIA B200", 183359, (10, 0), ARCH_BLACKWELL, mig_capable=True, fabric=True, rdma=True,
                  numa=True, sriov=True, pci_device=0x2901, pci_subsystem=0x199910DE, bar1_mib=262144, bar0_mib=None,
                  architecture_name="Blackwell", addressing_mode="None", nvswitches=None,
                  mig_profiles=("1g.23gb", "1g.23gb+me", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb")),
    "gb200": Board("NVIDIA GB200", 189471, (10, 0), ARCH_BLACKWELL, mig_capable=True, fabric=True, rdma=True,
                   numa=True, sriov=False, pci_device=0x2941, pci_subsystem=0x204610DE, bar1_mib=262144, bar0_mib=None,
                   architecture_name="Blackwell", addressing_mode="ATS", fabric_attached=True,
                   mig_profiles=("1g.23gb", "1g.23gb+me", "1g.47gb", "2g.47gb", "3g.93gb", "4g.93gb", "7g.186gb")),
    "gb300": Board("NVIDIA GB300", 284208, (10, 3), ARCH_BLACKWELL, mig_capable=True, fabric=True, rdma=True,
                   numa=True, sriov=False, pci_device=0x31C2, pci_subsystem=0x21F110DE, bar1_mib=524288, bar0_mib=None,
                   architecture_name="Blackwell", addressing_mode="ATS", fabric_attached=True),
    "l40s": Board("NVIDIA L40S", 46068, (8, 9), ARCH_ADA, mig_capable=False, fabric=False, rdma=False,
                  numa=True, sriov=True, pci_device=0x26B9, pci_subsystem=0x185110DE, bar1_mib=65536,
                  architecture_name="Ada Lovelace", addressing_mode="HMM"),
    "l4": Board("NVIDIA L4", 23034, (8, 9), ARCH_ADA, mig_capable=False, fabric=False, rdma=False,
                numa=False, sriov=False, pci_device=0x27B8, architecture_name="Ada Lovelace"),
    "a10g": Board("NVIDIA A10G", 23028, (8, 6), ARCH_AMPERE, mig_capable=False, fabric=False, rdma=False,
                  numa=False, sriov=False, pci_device=0x2237, architecture_name="Ampere"),
    "t4": Board("Tesla T4", 15360, (7, 5), ARCH_TURING, mig_capable=False, fabric=False, rdma=False,
                numa=False, sriov=False, pci_device=0x1EB8, pci_subsystem=0x12A210DE, bar1_mib=256,
                architecture_name="Turing", addressing_mode="HMM"),
}
