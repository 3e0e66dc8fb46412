"""The machine's DMI (SMBIOS) identity as ``/sys/class/dmi/id`` shows it (drivers/firmware/dmi-id.c).

Platform firmware rather than PCI, staged by this surface because it is the one that stages the
machine's platform sysfs.  The real layout: the files live in ``/sys/devices/virtual/dmi/id`` and
``/sys/class/dmi/id`` links there.  As on real firmware, a string the profile leaves empty has no
file, and ``modalias`` lists only the strings present.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mokka_core.stage.surface import Dir, Entry, File, Symlink

if TYPE_CHECKING:
    from mokka_core.model.config import Dmi

DMI_DIR = "sys/devices/virtual/dmi/id"
DMI_CLASS = "sys/class/dmi"

#: the attributes dmi-id.c shows, in its modalias order, with their modalias prefixes
MODALIAS_FIELDS = (
    ("bios_vendor", "bvn"), ("bios_version", "bvr"), ("bios_date", "bd"), ("bios_release", "br"),
    ("sys_vendor", "svn"), ("product_name", "pn"), ("product_version", "pvr"), ("board_vendor", "rvn"),
    ("board_name", "rn"), ("board_version", "rvr"), ("chassis_vendor", "cvn"), ("chassis_type", "ct"),
    ("chassis_version", "cvr"), ("product_sku", "sku"),
)
OTHER_FIELDS = ("product_family",)


def dmi_entries(dmi: Dmi) -> list[Entry]:
    values = _values(dmi)
    entries: list[Entry] = [Dir(DMI_DIR), Dir(DMI_CLASS), Symlink(f"{DMI_CLASS}/id", "../../devices/virtual/dmi/id")]
    entries += [File(f"{DMI_DIR}/{name}", f"{value}\n", mode=0o444) for name, value in sorted(values.items())]
    alias = modalias(values)
    entries.append(File(f"{DMI_DIR}/modalias", f"{alias}\n", mode=0o444))
    entries.append(File(f"{DMI_DIR}/uevent", f"MODALIAS={alias}\n", mode=0o644))
    entries.append(Symlink(f"{DMI_DIR}/subsystem", "../../../../class/dmi"))
    return entries


def _values(dmi: Dmi) -> dict[str, str]:
    names = [name for name, _ in MODALIAS_FIELDS] + list(OTHER_FIELDS)
    values = {name: str(getattr(dmi, name)) for name in names}
    return {name: value for name, value in values.items() if value}


def modalias(values: dict[str, str]) -> str:
    """``dmi:bvn…:svnNVIDIA:pnDGXH100:…:``, each string without spaces, colons or control characters."""
    parts = ["dmi"]
    for name, prefix in MODALIAS_FIELDS:
        if name in values:
            parts.append(prefix + "".join(c for c in values[name] if " " < c < "\x7f" and c != ":"))
    return ":".join(parts) + ":"
