"""Hand-written state files for the native tests (no dependency on mokka-core).

`make_state("h100")` returns the text of a state file for an 8-GPU H100 SXM node.
`overrides` maps full keys (e.g. "device.3.lost") to values; None removes a key.
"""
from __future__ import annotations

import os
from pathlib import Path

GiB = 1 << 30
MiB = 1 << 20

SHAPES = {
    "h100": dict(
        name="NVIDIA H100 80GB HBM3", n=8, arch=9, cc=(9, 0), dev_id=0x233010DE, subsys=0x165810DE,
        mem=80 * GiB, reserved=GiB, used=0, bus_width=5120, bar1=256 * GiB, gen=5, width=16,
        power=(700000, 200000, 700000, 95000), energy=600000, temp=(34, 92, 87, 95, 83), tlimit=1,
        clocks=dict(graphics=(345, 1980, 1755, 1755, 1980), sm=(345, 1980, 1755, 1755, 1980),
                    memory=(2619, 2619, 2619, 2619, 2619), video=(765, 1710, 1590, 1590, 1710)),
        mig=(0, 7), nvlink=(4, 18, 26562), switches=4, buses=[0x1A, 0x1B, 0x4A, 0x4B, 0x8A, 0x8B, 0xCA, 0xCB],
        uuid="GPU-01000100-0000-0000-0000-0000000000{:02x}", vbios="96.00.89.00.01", pn="692-2G520-0200-000",
        gsp="550.163.01", remap=(1, 1280), retired=0, fabric=1, inforom=("G520.0200.00.05", "2.1", "7.0", "N/A"),
        brand=2, cores=16896,
    ),
    "a100": dict(
        name="NVIDIA A100-SXM4-40GB", n=8, arch=7, cc=(8, 0), dev_id=0x20B010DE, subsys=0x134710DE,
        mem=40 * GiB, reserved=611319808, used=0, bus_width=5120, bar1=64 * GiB, gen=4, width=16,
        power=(400000, 100000, 400000, 72000), energy=500000, temp=(33, 92, 87, 95, 83), tlimit=0,
        clocks=dict(graphics=(210, 1410, 1095, 1095, 1410), sm=(210, 1410, 1095, 1095, 1410),
                    memory=(1215, 1215, 1215, 1215, 1215), video=(585, 1290, 1005, 1005, 1290)),
        mig=(0, 7), nvlink=(3, 12, 25781), switches=6, buses=[0x07, 0x0F, 0x47, 0x4E, 0x87, 0x90, 0xB7, 0xBD],
        uuid="GPU-12345678-1234-1234-1234-1234567800{:02x}", vbios="92.00.45.00.03", pn="692-2G506-0200-003",
        gsp="550.54.15", remap=(1, 640), retired=0, fabric=0, inforom=("G506.0200.00.04", "2.0", "6.0", "N/A"),
        brand=2, cores=6912,
    ),
    "t4": dict(
        name="Tesla T4", n=4, arch=6, cc=(7, 5), dev_id=0x1EB810DE, subsys=0x12A210DE,
        mem=16 * GiB, reserved=300 * MiB, used=0, bus_width=256, bar1=256 * MiB, gen=3, width=16,
        power=(70000, 60000, 70000, 12000), energy=100000, temp=(30, 96, 93, 0, 89), tlimit=0,
        clocks=dict(graphics=(300, 1590, 585, 585, 1590), sm=(300, 1590, 585, 585, 1590),
                    memory=(405, 5001, 5001, 5001, 5001), video=(540, 1470, 0, 0, 1470)),
        mig=None, nvlink=None, switches=0, buses=[0x3B, 0x86, 0xAF, 0xD8],
        uuid="GPU-00000074-0000-0000-0000-0000000000{:02x}", vbios="90.04.96.00.02", pn="900-2G183-0000-001",
        gsp="", remap=None, retired=1, fabric=0, inforom=("G183.0200.00.02", "1.1", "5.0", "N/A"),
        brand=2, cores=2560,
    ),
}


def make_state(shape: str = "h100", n: int | None = None, overrides: dict | None = None,
               events: list[tuple[int, int, int]] | None = None) -> str:
    s = SHAPES[shape]
    n = n or s["n"]
    kv: dict[str, object] = {
        "system.driver_version": "550.163.01",
        "system.nvml_version": "12.550.163.01",
        "system.cuda_version": 12040,
        "system.device_count": n,
        "system.init_error": 0,
    }
    half = max(1, n // 2)
    for i in range(n):
        p = f"device.{i}."
        bus = s["buses"][i] if i < len(s["buses"]) else 0x10 + i
        numa = 0 if i < half else 1
        d = {
            "name": s["name"], "uuid": s["uuid"].format(i), "serial": f"16523220{i:05d}",
            "board_part_number": s["pn"], "vbios_version": s["vbios"],
            "inforom.image": s["inforom"][0], "inforom.oem": s["inforom"][1], "inforom.ecc": s["inforom"][2],
            "brand": s["brand"], "architecture": s["arch"], "cuda_cc_major": s["cc"][0], "cuda_cc_minor": s["cc"][1],
            "minor_number": i, "board_id": bus << 8, "module_id": i + 1 if s["nvlink"] else 0,
            "multi_gpu_board": 0, "num_gpu_cores": s["cores"],
            "pci.bus_id": f"00000000:{bus:02X}:00.0", "pci.device_id": hex(s["dev_id"]),
            "pci.subsystem_id": hex(s["subsys"]),
            "pcie.max_gen": s["gen"], "pcie.gpu_max_gen": s["gen"], "pcie.current_gen": s["gen"],
            "pcie.max_width": s["width"], "pcie.current_width": s["width"],
            "memory.total": s["mem"], "memory.reserved": s["reserved"], "memory.used": s["used"],
            "memory.bus_width": s["bus_width"], "bar1.total": s["bar1"], "bar1.used": 2 * MiB,
            "temperature.gpu": s["temp"][0], "temperature.shutdown": s["temp"][1],
            "temperature.slowdown": s["temp"][2], "temperature.mem_max": s["temp"][3],
            "temperature.gpu_max": s["temp"][4], "temperature.tlimit": s["tlimit"],
            "temperature.memory": s["temp"][0] + 2 if s["arch"] >= 7 else 0,
            "power.supported": 1, "power.usage_mw": s["power"][3], "power.limit_mw": s["power"][0],
            "power.enforced_limit_mw": s["power"][0], "power.default_limit_mw": s["power"][0],
            "power.min_limit_mw": s["power"][1], "power.max_limit_mw": s["power"][2],
            "power.management_mode": 1, "power.energy_mj": s["energy"],
            "fan.count": 0, "clock.auto_boost": -1,
            "clock.event_reasons": 1, "clock.supported_event_reasons": 0x1ff,
            "pstate": 0, "utilization.gpu": 0, "utilization.memory": 0,
            "ecc.supported": 1, "ecc.current": 1, "ecc.pending": 1, "ecc.default": 1,
            "retired_pages.supported": s["retired"],
            "persistence_mode": 1, "compute_mode": 0, "display_mode": 0, "display_active": 0,
            "accounting_mode": 0, "accounting_buffer_size": 4000, "virtualization_mode": 0,
            "host_vgpu_mode": -1,
            "gsp.mode": 1 if s["gsp"] else 0, "gsp.default_mode": 1 if s["gsp"] else 0, "gsp.version": s["gsp"],
            "numa_node": numa, "cpu_affinity": "0-55,112-167" if numa == 0 else "56-111,168-223",
        }
        for cname, vals in s["clocks"].items():
            for k, v in zip(("current", "max", "app", "default_app", "boost_max"), vals, strict=True):
                d[f"clock.{cname}.{k}"] = v
        if s["mig"]:
            d["mig.current"], d["mig.max_devices"] = s["mig"]
            d["mig.pending"] = s["mig"][0]
        if s["remap"]:
            d["remapped_rows.supported"] = 1
            d["remapped_rows.histogram.max"] = s["remap"][1]
        if s["fabric"]:
            d.update({"fabric.supported": 1, "fabric.cluster_uuid": "00000000-0000-0000-0000-000000000001",
                      "fabric.clique_id": 0, "fabric.state": 3, "fabric.status": 0, "fabric.health_mask": 0x1AA})
        levels = []
        for j in range(n):
            if i == j:
                levels.append(0)
            elif (j < half) == (i < half):
                levels.append(40 if abs(i - j) > 1 else 30)
            else:
                levels.append(50)
        d["topology.levels"] = ",".join(map(str, levels))
        if s["nvlink"]:
            ver, links, mbps = s["nvlink"]
            d.update({"nvlink.count": links, "nvlink.version": ver, "nvlink.speed_mbps": mbps,
                      "nvlink.nvswitch_links": links})
            d["topology.nvlinks"] = ",".join("0" if j == i else str(links) for j in range(n))
            for k in range(links):
                d[f"nvlink.{k}.state"] = 1
                d[f"nvlink.{k}.remote_type"] = 2
                d[f"nvlink.{k}.remote_bus_id"] = f"00000000:{5 + k % s['switches']:02X}:00.0"
                d[f"nvlink.{k}.remote_device_id"] = "0x22a310de"
        for k, v in d.items():
            kv[p + k] = v
    for k, v in (overrides or {}).items():
        if v is None:
            kv.pop(k, None)
        else:
            kv[k] = v
    lines = ["mokka-nvml-state 1"]
    for k, v in kv.items():
        lines.append(f"{k}={v}")
    for idx, (seq, dev, xid) in enumerate(events or []):
        lines += [f"event.{idx}.seq={seq}", f"event.{idx}.device={dev}", f"event.{idx}.type=8",
                  f"event.{idx}.data={xid}"]
    lines.append("end")
    return "\n".join(lines) + "\n"


def write_state(path: os.PathLike | str, text: str) -> None:
    """Atomic replace (temp file in the same directory + rename), like mokka-core does."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


if __name__ == "__main__":
    import sys
    sys.stdout.write(make_state(sys.argv[1] if len(sys.argv) > 1 else "h100"))
