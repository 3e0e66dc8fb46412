"""Real nvidia-smi (Debian 535, 550 and 555) against the mock library and state files of the built-in profiles."""
from __future__ import annotations

import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import nvml_env

SHAPES = ["h100", "a100", "t4"]
QUERY = ("index,name,uuid,serial,pci.bus_id,pci.device_id,pci.sub_device_id,driver_version,vbios_version,"
         "memory.total,memory.reserved,memory.used,memory.free,temperature.gpu,power.draw,power.limit,"
         "clocks.sm,clocks.max.sm,ecc.mode.current,mig.mode.current,pstate,compute_mode")
COMMANDS = {
    "default": [],
    "list": ["-L"],
    "query": ["-q"],
    "xml": ["-q", "-x"],
    "csv": [f"--query-gpu={QUERY}", "--format=csv,noheader"],
    "topo": ["topo", "-m"],
    "nvlink": ["nvlink", "-s"],
    "display": ["-q", "-d", "MEMORY,ECC,TEMPERATURE,POWER,CLOCK,PERFORMANCE,PIDS"],
    "dmon": ["dmon", "-c", "1"],
    "pmon": ["pmon", "-c", "1"],
}
BAD = ("Function Not Found", "Unknown Error", "Uninitialized")


def parse_state(path: Path) -> dict[str, str]:
    kv = {}
    for line in path.read_text().splitlines()[1:-1]:
        if "=" in line:
            k, v = line.split("=", 1)
            kv[k] = v
    return kv


def run_smi(smi: Path, lib_dir: Path, state: Path, args: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([str(smi), *args], env=nvml_env(lib_dir, state), capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("command", list(COMMANDS))
def test_commands_succeed(smi, lib_dir, state_file, shape, command):
    st = state_file(shape)
    p = run_smi(smi, lib_dir, st, COMMANDS[command])
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    for bad in BAD:
        assert bad not in out, f"{bad!r} in output of nvidia-smi {' '.join(COMMANDS[command])}:\n{out}"
    assert "mokka-nvml:" not in p.stderr
    n = int(parse_state(st)["system.device_count"])
    if command == "list":
        assert len(p.stdout.strip().splitlines()) == n
    if command == "csv":
        assert len(p.stdout.strip().splitlines()) == n


def mib(v: str) -> int:
    return int(v) >> 20


@pytest.mark.parametrize("shape", SHAPES)
def test_xml_values_equal_state(smi, lib_dir, state_file, shape):
    st = state_file(shape)
    kv = parse_state(st)
    p = run_smi(smi, lib_dir, st, ["-q", "-x"])
    assert p.returncode == 0, p.stderr
    root = ET.fromstring(p.stdout)
    assert root.findtext("driver_version") == kv["system.driver_version"]
    cuda = int(kv["system.cuda_version"])
    assert root.findtext("cuda_version") == f"{cuda // 1000}.{cuda % 1000 // 10}"
    gpus = root.findall("gpu")
    assert len(gpus) == int(kv["system.device_count"])
    arch = {"6": "Turing", "7": "Ampere", "9": "Hopper"}
    for i, g in enumerate(gpus):
        d = {k[len(f"device.{i}."):]: v for k, v in kv.items() if k.startswith(f"device.{i}.")}
        assert g.get("id") == d["pci.bus_id"]
        assert g.findtext("product_name") == d["name"]
        assert g.findtext("product_architecture") == arch[d["architecture"]]
        assert g.findtext("uuid") == d["uuid"]
        assert g.findtext("serial") == d["serial"]
        assert g.findtext("minor_number") == d["minor_number"]
        assert g.findtext("vbios_version") == d["vbios_version"]
        assert g.findtext("board_part_number") == d["board_part_number"]
        assert g.findtext("pci/pci_bus_id") == d["pci.bus_id"]
        assert int(g.findtext("pci/pci_device_id"), 16) == int(d["pci.device_id"], 16)
        assert int(g.findtext("pci/pci_sub_system_id"), 16) == int(d["pci.subsystem_id"], 16)
        assert g.findtext("pci/pci_gpu_link_info/pcie_gen/max_link_gen") == d["pcie.max_gen"]
        assert g.findtext("pci/pci_gpu_link_info/link_widths/max_link_width") == d["pcie.max_width"] + "x"
        assert g.findtext("fb_memory_usage/total") == f"{mib(d['memory.total'])} MiB"
        assert g.findtext("fb_memory_usage/reserved") == f"{mib(d['memory.reserved'])} MiB"
        assert g.findtext("bar1_memory_usage/total") == f"{mib(d['bar1.total'])} MiB"
        pw = g.find("gpu_power_readings") if g.find("gpu_power_readings") is not None else g.find("power_readings")
        def watts(k: str, d: dict = d) -> str:
            return f"{int(d[k]) / 1000:.2f} W"

        assert pw.findtext("default_power_limit") == watts("power.default_limit_mw")
        assert pw.findtext("min_power_limit") == watts("power.min_limit_mw")
        assert pw.findtext("max_power_limit") == watts("power.max_limit_mw")
        assert pw.findtext("current_power_limit") == watts("power.enforced_limit_mw")
        assert g.findtext("max_clocks/graphics_clock") == f"{d['clock.graphics.max']} MHz"
        assert g.findtext("max_clocks/mem_clock") == f"{d['clock.memory.max']} MHz"
        assert g.findtext("clocks/sm_clock") == f"{d['clock.sm.current']} MHz"
        assert g.findtext("applications_clocks/graphics_clock") == f"{d['clock.graphics.app']} MHz"
        assert g.findtext("temperature/gpu_temp") == f"{d['temperature.gpu']} C"
        if d["temperature.tlimit"] == "0":
            assert g.findtext("temperature/gpu_temp_max_threshold") == f"{d['temperature.shutdown']} C"
            assert g.findtext("temperature/gpu_temp_slow_threshold") == f"{d['temperature.slowdown']} C"
        assert g.findtext("ecc_mode/current_ecc") == ("Enabled" if d["ecc.current"] == "1" else "Disabled")
        mig = g.findtext("mig_mode/current_mig")
        assert mig == ({"0": "Disabled", "1": "Enabled"}.get(d.get("mig.current", "")) or "N/A")
        assert g.findtext("persistence_mode") == "Enabled"
        gsp = d.get("gsp.version") or "N/A"
        assert g.findtext("gsp_firmware_version") == gsp


def test_csv_values(smi, lib_dir, state_file):
    st = state_file("h100")
    p = run_smi(smi, lib_dir, st, ["--query-gpu=index,uuid,memory.total,power.limit,clocks.max.sm",
                                   "--format=csv,noheader"])
    assert p.returncode == 0
    first = p.stdout.splitlines()[0]
    uuid = parse_state(st)["device.0.uuid"]  # derived from the node
    assert first == f"0, {uuid}, 81559 MiB, 700.00 W, 1980 MHz"  # 81559 MiB: the real H100 80GB HBM3


def test_topo_shows_nvlink_matrix(smi, lib_dir, state_file):
    p = run_smi(smi, lib_dir, state_file("h100"), ["topo", "-m"])
    assert p.returncode == 0
    rows = [ln.split("\t") for ln in p.stdout.splitlines() if ln.startswith("GPU") and "\t" in ln]
    assert len(rows) == 8 and all(r.count("NV18") == 7 for r in rows)
    p = run_smi(smi, lib_dir, state_file("t4"), ["topo", "-m"])
    assert p.returncode == 0 and "NV" not in "".join(ln for ln in p.stdout.splitlines() if ln.startswith("GPU0"))
    assert "SYS" in p.stdout and "NODE" in p.stdout


@pytest.mark.parametrize(("host_max", "shown"), [(0, "N/A"), (4, "4")])
def test_pcie_generations_each_their_own(smi, lib_dir, state_file, host_max, shown):
    # qx-gb200.xml: link max 5, the GPU's own max 6, the host's N/A (a VM); qx-gb300.xml: host max 4
    st = state_file("h100", n=1, overrides={"device.0.pcie.max_gen": 5, "device.0.pcie.gpu_max_gen": 6,
                                            "device.0.pcie.host_max_gen": host_max})
    p = run_smi(smi, lib_dir, st, ["-q", "-x"])
    assert p.returncode == 0, p.stderr
    gen = ET.fromstring(p.stdout).find("gpu/pci/pci_gpu_link_info/pcie_gen")
    assert (gen.findtext("max_link_gen"), gen.findtext("max_device_link_gen"), gen.findtext("max_host_link_gen")) == \
        ("5", "6", shown)


def test_processes_listed(smi, lib_dir, state_file):
    st = state_file("h100", overrides={"device.2.process.0.pid": 4321, "device.2.process.0.name": "python3",
                                       "device.2.process.0.used_bytes": 512 << 20,
                                       "device.2.process.1.pid": 77, "device.2.process.1.type": 1,
                                       "device.2.process.1.name": "Xorg", "device.2.process.1.used_bytes": 4 << 20})
    p = run_smi(smi, lib_dir, st, [])
    assert p.returncode == 0
    assert any("4321" in ln and "python3" in ln and " C " in ln and "512MiB" in ln for ln in p.stdout.splitlines())
    assert any(" 77 " in ln and "Xorg" in ln and " G " in ln for ln in p.stdout.splitlines())


def test_driver_not_loaded(smi, lib_dir, state_file):
    p = run_smi(smi, lib_dir, state_file("h100", overrides={"system.init_error": 9}), [])
    assert p.returncode == 9
    assert "couldn't communicate with the NVIDIA driver" in p.stdout + p.stderr


def test_version_mismatch(smi, lib_dir, state_file):
    p = run_smi(smi, lib_dir, state_file("h100", overrides={"system.init_error": 18}), [])
    assert p.returncode == 18 and "Driver/library version mismatch" in p.stdout + p.stderr


def test_one_gpu_lost(smi, lib_dir, state_file):
    # like a real node with a GPU fallen off the bus: the default view and -q stop at the handle
    # error, -L reports it and still lists the others
    st = state_file("h100", overrides={"device.3.lost": 1})
    for args in ([], ["-q"], ["-L"]):
        p = run_smi(smi, lib_dir, st, args)
        out = p.stdout + p.stderr
        assert "Unable to determine the device handle for" in out and "GPU is lost" in out
        assert p.returncode in (0, 15)
    assert p.stdout.count("NVIDIA H100") == 7 and p.returncode == 15
    p = run_smi(smi, lib_dir, st, ["-q", "-i", "2"])
    assert p.returncode == 0 and "GPU is lost" not in p.stdout


@pytest.mark.parametrize("text", ["", "mokka-nvml-state 1\ndevice.0.name=x\n", "mokka-nvml-state 2\nend\n",
                                  "\x00\xff" * 100, "mokka-nvml-state 1\ndevice.99999999999.name=x\nend\n"])
def test_garbled_state_never_crashes(smi, lib_dir, state_file, text):
    p = run_smi(smi, lib_dir, state_file(text=text), ["-q"])
    assert p.returncode == 9, (p.returncode, p.stdout, p.stderr)
    assert p.stderr.count("mokka-nvml:") == 1


def test_a_delayed_failure_takes_the_gpu_away_in_the_middle_of_a_query_loop(smi, lib_dir, state_file):
    # failure.after_calls counts this nvidia-smi process's calls: -q -l 1 prints the GPU healthy, then lost. The
    # process attached the GPU before it was lost, so it keeps the handle and what the driver read at attach
    # (name, UUID: test_pynvml's test_a_gpu_lost_after_attach_keeps_its_identity); the rest is GPU is lost.
    failure = {"mode": 2, "after_calls": 300, "probability_ppb": 10**9, "seed": 0, "xid": 79}
    st = state_file("h100", n=1, overrides={f"device.0.failure.{k}": v for k, v in failure.items()})
    with pytest.raises(subprocess.TimeoutExpired) as looping:
        run_smi(smi, lib_dir, st, ["-q", "-l", "1"], timeout=8)
    out = (looping.value.stdout or b"").decode()
    iterations = out.split("\nTimestamp ")
    assert len(iterations) >= 4, out
    assert "NVIDIA H100" in iterations[1] and "GPU is lost" not in iterations[0] + iterations[1]
    last = iterations[-2]  # the last complete one
    assert "Serial Number                         : GPU is lost" in last, last
    assert "Product Name                          : NVIDIA H100 80GB HBM3" in last and "GPU UUID  " in last, last


def test_dmon_gpm_metrics_on_hopper_and_none_before(smi, lib_dir, state_file):
    # GPM needs two samples: the first line shows "-" (as on a real H100), the later ones the rates
    args = ["dmon", "--gpm-metrics", "2,20", "-c", "4", "-i", "0"]
    p = run_smi(smi, lib_dir, state_file("h100", overrides={"device.0.utilization.gpu": 70}), args)
    assert p.returncode == 0, p.stdout + p.stderr
    header, last = p.stdout.splitlines()[0], p.stdout.splitlines()[-1].split()
    assert header.split()[-2:] == ["id=2", "id=20"] and last[-2:] == ["70", "2048"]  # SM util %, PCIe TX MiB/s
    p = run_smi(smi, lib_dir, state_file("a100"), args)
    assert p.returncode == 0 and p.stdout.splitlines()[-1].split()[-2:] == ["-", "-"]
