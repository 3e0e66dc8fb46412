"""Compare a built-in profile with its real capture, fact by fact (a working tool for profile authors).

    .venv/bin/python tools/board_facts.py h100            # real nvidia-smi 550 -q -x on `mokka run`
    .venv/bin/python tools/board_facts.py h100 --xml SIM.xml

A fact is one leaf of the first GPU's ``-q -x`` element tree that describes the board or driver
(``UNIT_OR_LIVE`` lists the leaves that describe one unit, the host or a live reading). Only leaves
that both documents have are comparable (nvidia-smi 550 has no element for what newer drivers added),
and not those only the capture's newer driver reports so (``newer_driver_only``).
"""

from __future__ import annotations

import argparse
import fnmatch
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from mokka_core.testing import consumers

DEPRECATED = "Requested functionality has been deprecated"
CAPTURES = Path(__file__).resolve().parents[1] / "reference" / "captures"

UNIT_OR_LIVE = (
    "timestamp", "driver_version", "cuda_version", "attached_gpus",  # the host and its driver
    "gpu/serial", "gpu/uuid", "gpu/pdi", "gpu/minor_number", "gpu/board_id", "gpu/gpu_module_id",
    "gpu/platformInfo/*", "gpu/pci/pci_bus", "gpu/pci/pci_device", "gpu/pci/pci_domain", "gpu/pci/pci_bus_id",
    "gpu/pci/replay_*", "gpu/pci/tx_util", "gpu/pci/rx_util", "gpu/inforom_bbx_flush/*",
    "gpu/mig_devices*", "gpu/processes*", "gpu/accounted_processes*", "gpu/fabric/*",
    "gpu/performance_state", "gpu/clocks/*", "gpu/clocks_event_reasons*", "gpu/utilization/*",
    "gpu/encoder_stats/*", "gpu/fbc_stats/*", "gpu/ecc_errors/*", "gpu/retired_pages/*",
    "gpu/remapped_rows/remapped_row_*", "gpu/fb_memory_usage/used", "gpu/fb_memory_usage/free",
    "gpu/bar1_memory_usage/used", "gpu/bar1_memory_usage/free", "gpu/cc_protected_memory_usage/*",
    "gpu/temperature/gpu_temp", "gpu/temperature/memory_temp", "gpu/temperature/gpu_temp_tlimit",
    "gpu/*power_readings/average_power_draw", "gpu/*power_readings/instant_power_draw",
    "gpu/*power_readings/power_state", "gpu/fan_speed", "gpu/gpu_virtualization_mode/virtualization_mode",
)


def facts(document: ET.Element) -> dict[str, str]:
    """The model-describing leaves of the first GPU, by path (repeated siblings numbered)."""
    found: dict[str, str] = {}

    def walk(element: ET.Element, path: str) -> None:
        children = list(element)
        if path.endswith("supported_mem_clock") or path.split("[")[0].endswith("supported_mem_clock"):
            graphics = [c.text or "" for c in children if c.tag == "supported_graphics_clock"]
            found[path] = f"{element.findtext('value')}: {', '.join(graphics)}"
            return
        if not children:
            found[path] = (element.text or "").strip()
            return
        tags = [c.tag for c in children]
        for child in children:
            twins = tags.count(child.tag)
            label = child.tag if twins == 1 else f"{child.tag}[{tags[:children.index(child)].count(child.tag)}]"
            walk(child, f"{path}/{label}")

    gpu = document.find("gpu")
    if gpu is None:
        raise SystemExit("no <gpu> element")
    walk(gpu, "gpu")
    driver = document.findtext("driver_version") or ""
    return {path: value.replace(driver, "<driver>") if driver else value for path, value in found.items()
            if not any(fnmatch.fnmatch(path, pattern) for pattern in UNIT_OR_LIVE)}


def newer_driver_only(real: str, simulated: str) -> bool:
    """A value only the capture's newer driver reports so: the profile's driver follows its own (README, Driver)."""
    return real == DEPRECATED or simulated == "Unknown"  # 550 names no Blackwell architecture


def compare(capture: ET.Element, simulated: ET.Element) -> tuple[list[str], list[tuple[str, str, str]], list[str]]:
    """(matched paths, (path, capture, simulated) that differ, paths not comparable)."""
    real, sim = facts(capture), facts(simulated)
    comparable = [path for path in real if path in sim and not newer_driver_only(real[path], sim[path])]
    matched = [path for path in comparable if real[path] == sim[path]]
    differ = [(path, real[path], sim[path]) for path in comparable if real[path] != sim[path]]
    return matched, differ, [path for path in real if path not in comparable]


def simulate(profile: str, version: str) -> ET.Element:
    smi = consumers.require("nvidia-smi", version=version)
    mokka = Path(sys.executable).parent / "mokka"
    out = subprocess.run([str(mokka), "run", "--profile", profile, "--", str(smi), "-q", "-x"],
                         capture_output=True, text=True, check=True, timeout=120).stdout
    return ET.fromstring(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile")
    parser.add_argument("--xml", type=Path, help="a simulated -q -x document instead of running nvidia-smi")
    parser.add_argument("--smi", default="550")
    parser.add_argument("--absent", action="store_true", help="also list the capture's leaves not comparable")
    args = parser.parse_args()
    simulated = ET.parse(args.xml).getroot() if args.xml else simulate(args.profile, args.smi)
    matched, differ, absent = compare(ET.parse(CAPTURES / f"qx-{args.profile}.xml").getroot(), simulated)
    for path, real, sim in differ:
        print(f"DIFF {path}: capture {real!r} simulated {sim!r}")
    if args.absent:
        for path in absent:
            print(f"NOT COMPARABLE {path}")
    print(f"{args.profile}: {len(matched)}/{len(matched) + len(differ)} comparable facts match"
          f" ({len(absent)} not comparable: not in nvidia-smi {args.smi}, or newer-driver only)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
