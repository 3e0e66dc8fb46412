"""``mokka run`` shows a whole machine: DMI, NUMA nodes on the host's CPUs, SR-IOV, and Slurm finds every GPU.

Real consumers only (cat, lspci, nvidia-smi, Debian's slurmd with its NVML plugin), with the
installed gpu and pci surfaces; they need root (CI runs as root) and fetch their tools themselves.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mokka_core.model.numa import HOST_CPUS_FILE, parse_cpulist
from mokka_core.model.spec import NodeSpec
from mokka_core.testing import consumers
from mokka_core.testing.consumers import ConsumerUnavailable, missing, required

pytestmark = pytest.mark.consumer

HOST_CPUS = set(parse_cpulist(Path(HOST_CPUS_FILE).read_text()))


@pytest.fixture(autouse=True)
def real_node() -> None:
    from mokka_core.stage.surface import discover

    if os.geteuid() != 0 and not required():
        pytest.skip("mount namespaces need root (CI runs as root)")
    if not {"gpu", "pci"} <= set(discover()):
        reason = "mokka-sim-gpu and mokka-sim-pci are not installed in this environment"
        pytest.fail(reason) if os.environ.get("MOKKA_E2E") == "1" else pytest.skip(reason)


def mokka_run(*args: str, timeout: float = 120) -> str:
    done = subprocess.run([sys.executable, "-m", "mokka_core", "run", *args], capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_dmi_names_the_simulated_machine() -> None:
    out = mokka_run("--profile", "h100", "--", "sh", "-c",
                    "cat /sys/class/dmi/id/sys_vendor /sys/class/dmi/id/product_name; readlink /sys/class/dmi/id")
    assert out.splitlines() == ["NVIDIA", "DGXH100", "../../devices/virtual/dmi/id"]


#: major of each driver name in /proc/devices (awk, as nv-dev-create.sh reads it), then each node's major
#: (stat), for the names the gpu surface (nvidia.ko, nvidia-uvm.ko) and the imex surface register
DEVICES_SCRIPT = """
for name in nvidia nvidiactl nvidia-uvm nvidia-caps nvidia-caps-imex-channels; do
  awk -v name=$name '$2 == name { print name, $1 }' /proc/devices
done
for node in /dev/nvidia0 /dev/nvidiactl /dev/nvidia-uvm /dev/nvidia-caps/nvidia-cap512 \\
            /dev/nvidia-caps-imex-channels/channel0; do
  printf '%s %d\\n' $node 0x$(stat -c %t $node)
done
"""


@pytest.mark.parametrize("delivery", ["run", "shim"])
def test_proc_devices_names_the_majors_of_the_nodes_in_dev(delivery: str) -> None:
    """The container toolkit and nvidia-modprobe find a driver's major in /proc/devices, then use /dev by it."""
    if os.geteuid() != 0:
        pytest.skip("staged device nodes are character devices only for root")
    done = subprocess.run([sys.executable, "-m", "mokka_core", delivery, "--profile", "gb200", "--", "sh", "-c",
                           DEVICES_SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    found = dict(line.split() for line in done.stdout.splitlines())
    assert found["nvidia"] == found["nvidiactl"] == found["/dev/nvidia0"] == found["/dev/nvidiactl"] == "195"
    assert found["nvidia-uvm"] == found["/dev/nvidia-uvm"]
    assert found["nvidia-caps"] == found["/dev/nvidia-caps/nvidia-cap512"]
    assert found["nvidia-caps-imex-channels"] == found["/dev/nvidia-caps-imex-channels/channel0"]
    assert len({found["nvidia-uvm"], found["nvidia-caps"], found["nvidia-caps-imex-channels"], "195"}) == 4


def test_numa_nodes_name_host_cpus_and_agree_with_pci_and_nvml() -> None:
    smi = consumers.require("nvidia-smi", "550")
    node = NodeSpec(profile="h100").resolve()
    script = "; ".join([
        "for n in /sys/devices/system/node/node*; do echo \"$(basename $n) $(cat $n/cpulist)\"; done",
        *(f"echo pci {gpu.index} $(cat /sys/bus/pci/devices/{gpu.bus_id}/numa_node)"
          f" $(cat /sys/bus/pci/devices/{gpu.bus_id}/local_cpulist)" for gpu in node.gpus),
        f"{smi} topo -m",
    ])
    out = mokka_run("--profile", "h100", "--", "sh", "-c", script)
    nodes = dict(re.findall(r"^node(\d+) (\S+)$", out, re.M))
    assert sorted(nodes) == ["0", "1"]
    for cpus in nodes.values():
        assert set(parse_cpulist(cpus)) <= HOST_CPUS
    pci = {int(i): (numa, cpus) for i, numa, cpus in re.findall(r"^pci (\d+) (\d+) (\S+)$", out, re.M)}
    assert [pci[i][0] for i in range(8)] == ["0"] * 4 + ["1"] * 4  # the DGX's sockets, as on the board
    # nvidia-smi's CPU Affinity and NUMA Affinity columns (NVML) are the PCI files' values
    header = next(line for line in out.splitlines() if "CPU Affinity" in line)
    columns = [c.strip() for c in re.sub(r"\x1b\[[0-9;]*m", "", header).split("\t")]
    cpu_col, numa_col = columns.index("CPU Affinity"), columns.index("NUMA Affinity")
    for index in range(8):
        row = next(line for line in out.splitlines() if line.startswith(f"GPU{index}\t")).split("\t")
        assert (row[numa_col].strip(), row[cpu_col].strip()) == pci[index]
        assert set(parse_cpulist(pci[index][1])) <= set(parse_cpulist(nodes[pci[index][0]]))


def test_lspci_shows_sr_iov() -> None:
    consumers.apt_tool("lspci", "pciutils")
    out = mokka_run("--profile", "h100", "--", "lspci", "-vvv", "-s", "1b:00.0")
    assert "Single Root I/O Virtualization (SR-IOV)" in out
    assert "Initial VFs: 32, Total VFs: 32, Number of VFs: 0" in out


def slurm_conf(tmp_path: Path, node_line: str, gpus: int) -> Path:
    try:
        plugins = consumers.slurm_nvml_plugin()
    except ConsumerUnavailable as exc:
        missing(str(exc))
    system_plugins = next(Path("/usr/lib").glob("*/slurm-wlm"), None)
    if system_plugins is None:
        missing("slurmd's plugin directory (/usr/lib/<arch>/slurm-wlm) not found")
    (tmp_path / "gres.conf").write_text("AutoDetect=nvml\n")
    conf = tmp_path / "slurm.conf"
    conf.write_text("\n".join([
        "ClusterName=mokka", "SlurmctldHost=localhost", "GresTypes=gpu",
        f"PluginDir={system_plugins}:{plugins}",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
        f"SlurmdSpoolDir={tmp_path / 'spool'}", f"SlurmdPidFile={tmp_path / 'slurmd.pid'}",
        f"{node_line} Gres=gpu:{gpus} State=UNKNOWN", "PartitionName=all Nodes=ALL Default=YES", "",
    ]))
    return conf


def test_slurm_autodetects_every_gpu_with_cores_and_links(tmp_path: Path) -> None:
    slurmd = str(consumers.apt_tool("slurmd", "slurmd"))
    node = NodeSpec(profile="h100").resolve()
    probe = slurm_conf(tmp_path, "NodeName=mokka", len(node.gpus))
    # the machine as slurmd sees it inside the node, as a real site pastes `slurmd -C` into slurm.conf
    machine = mokka_run("--profile", "h100", "--", slurmd, "-C", "-f", str(probe), "-N", "mokka").splitlines()[0]
    conf = slurm_conf(tmp_path, re.sub(r"^NodeName=\S+", "NodeName=mokka", machine), len(node.gpus))
    out = mokka_run("--profile", "h100", "--", "sh", "-c", f"{slurmd} -f {conf} -N mokka -G 2>&1")
    found = re.findall(r"Gres Name=gpu .*Index=(\d+) .*File=(\S+) Cores=(\S*) CoreCnt=\d+ Links=(\S+)", out)
    assert len(found) == len(node.gpus) == 8, out
    threads = int(re.search(r"ThreadsPerCore=(\d+)", machine).group(1))  # type: ignore[union-attr]
    for (index, device, cores, links), gpu in zip(found, node.gpus, strict=True):
        assert (int(index), device) == (gpu.index, f"/dev/nvidia{gpu.minor_number}")
        assert cores, f"GPU {index} has no cores: its affinity names no CPU slurmd knows"
        if threads == 1 and sorted(HOST_CPUS) == list(range(len(HOST_CPUS))):  # core ids are CPU ids
            assert parse_cpulist(cores) == parse_cpulist(gpu.cpu_affinity or "")
        # NVSwitch board: every peer is reached through the switches, so no direct link (-1 is itself)
        assert links.split(",") == ["-1" if peer.index == gpu.index else "0" for peer in node.gpus]


SM_MAX = 1980  # h100's max SM clock (the capture)


def test_readings_move_together_and_status_agrees_with_nvidia_smi() -> None:
    """The load model on h100 through real nvidia-smi 550, each change by nvml-mock-ctl (model/physics.py)."""
    smi = consumers.require("nvidia-smi", "550")
    query = f"{smi} --query-gpu=temperature.gpu,power.draw,clocks.sm,memory.used,memory.free,memory.total," \
            "clocks_event_reasons.hw_thermal_slowdown --format=csv,noheader,nounits -i"
    ctl = f"{sys.executable} -m mokka_core.ctl"
    script = "; ".join([
        f"{ctl} util 0 100 >/dev/null", f"{ctl} temp 0 95 >/dev/null", f"{ctl} util 1 100 >/dev/null",
        f"{ctl} temp 1 60 >/dev/null", f"{ctl} set 2 'processes=[{{pid: 42, name: train, used_memory_mib: 30000}}]'"
        " >/dev/null", "sleep 0.2", f"{query} 0", f"{query} 1", f"{query} 2", f"{ctl} status --json"])
    done = subprocess.run([sys.executable, "-m", "mokka_core", "run", "--profile", "h100", "--", "sh", "-c", script],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [[cell.strip() for cell in line.split(",")] for line in done.stdout.splitlines() if line.count(",") == 6]
    hot, cool, loaded = rows
    assert hot[0] == "95" and hot[6] == "Active" and cool[0] == "60" and cool[6] == "Not Active"
    assert float(hot[2]) < float(cool[2]) and float(cool[2]) >= 0.9 * SM_MAX and float(cool[1]) > 350
    used, free, total = (int(v) for v in loaded[3:6])
    assert used >= 30000 and used + free <= total and total - (used + free) < 1024  # reserved memory aside
    status = json.loads(done.stdout[done.stdout.index("{"):])
    for row, gpu in zip((hot, cool), status["gpus"][:2], strict=True):
        assert (gpu["temperature_c"], gpu["sm_clock_mhz"]) == (int(row[0]), int(float(row[2])))
        assert abs(gpu["power_w"] - float(row[1])) < 0.01
    assert re.search(r"hw_thermal_slowdown", json.dumps(status["gpus"][0]["throttle"]))


def test_dmesg_reads_the_nodes_boot_not_the_hosts() -> None:
    """With no Xid raised yet, the node's kernel log holds the driver's loading lines: util-linux dmesg reads
    them from /dev/kmsg (on an empty /dev/kmsg it would fall back to syslog(2): the host's log)."""
    out = mokka_run("--profile", "h100", "--", "dmesg")
    lines = [line.split("] ", 1)[1] for line in out.splitlines()]
    assert lines[0] == "nvidia: loading out-of-tree module taints kernel."
    assert lines[2].startswith("NVRM: loading NVIDIA UNIX ") and "Kernel Module  550.163.01  " in lines[2]
    assert lines[-1].startswith("nvidia-uvm: Loaded the UVM driver, major device number ")
    assert len(lines) == 5, out


#: ``dmesg -w`` waits in read() on the node's /dev/kmsg; an Xid raised meanwhile is its next line
FOLLOW_SCRIPT = """
dmesg -w > "$MOKKA_ROOT/follow" & follow=$!
for i in $(seq 250); do [ "$(wc -l < "$MOKKA_ROOT/follow")" -ge 5 ] && break; sleep 0.02; done
{ctl} xid 0 13 > /dev/null
for i in $(seq 250); do grep -q 'NVRM: Xid' "$MOKKA_ROOT/follow" && break; sleep 0.02; done
kill $follow; wait $follow || true
cat "$MOKKA_ROOT/follow"
"""


def test_dmesg_follows_the_nodes_kernel_log() -> None:
    ctl = Path(sys.executable).parent / "nvml-mock-ctl"
    out = mokka_run("--profile", "h100", "--", "sh", "-c", FOLLOW_SCRIPT.replace("{ctl}", str(ctl)))
    lines = [line.split("] ", 1)[1] for line in out.splitlines()]
    assert lines[0] == "nvidia: loading out-of-tree module taints kernel." and len(lines) == 6, out
    assert re.fullmatch(r"NVRM: Xid \(PCI:0000:1b:00\): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp "
                        r"Exception on \(GPC 1, TPC 3, SM 0\): Out Of Range Address", lines[5]), out
    # the loading lines are stamped when the node came up (seconds since the host booted), not 0
    stamps = [float(line.split("]", 1)[0].lstrip("[ ")) for line in out.splitlines()]
    assert 0 < stamps[0] <= stamps[5], out
