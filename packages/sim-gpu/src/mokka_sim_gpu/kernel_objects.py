"""Kernel-module files for ``modinfo``: tiny ELF objects carrying a ``.modinfo`` section, plus the indexes.

``modinfo -b ROOT nvidia`` finds the module through ``ROOT/lib/modules/<release>/modules.dep.bin``;
``modprobe -d ROOT -R <modalias>`` (what lspci's "Kernel modules:" asks) through ``modules.alias.bin``.
libkmod reads only these binary indexes; the text files beside them are their twins, as depmod
writes both.  modinfo prints the ``key=value`` strings of the object's ``.modinfo`` section and
nothing else in the object is read, so the object holds only that section and the section names.
"""

from __future__ import annotations

import os
import struct
from typing import TYPE_CHECKING

from mokka_core.stage.surface import Entry, File

from .device_nodes import NVIDIA_MAJOR
from .render_proc import PARAMS, STRING_PARAMS

if TYPE_CHECKING:
    from mokka_core.model.node import Node

MODULE_DIR = "kernel/drivers/video"  # where NVIDIA's installer puts its modules
#: module name -> (file name, the modules it depends on)
MODULE_FILES = {
    "nvidia": ("nvidia.ko", ()),
    "nvidia_uvm": ("nvidia-uvm.ko", ("nvidia",)),
    "nvidia_modeset": ("nvidia-modeset.ko", ("nvidia",)),
    "nvidia_drm": ("nvidia-drm.ko", ("nvidia_modeset", "nvidia")),
}
ELF_MACHINES = {"x86_64": 62, "aarch64": 183}
SHT_PROGBITS, SHT_STRTAB, SHF_ALLOC = 1, 3, 2


def kernel_object_entries(node: Node, release: str | None = None, machine: str | None = None) -> list[Entry]:
    uname = os.uname()
    release = release or uname.release
    machine = machine or uname.machine
    base = f"lib/modules/{release}"
    entries: list[Entry] = []
    dep_lines = []
    for name, (filename, deps) in MODULE_FILES.items():
        info = modinfo_fields(name, node.driver_version, release)
        entries.append(File(f"{base}/{MODULE_DIR}/{filename}", elf_object(info, machine), mode=0o644))
        dep_paths = " ".join(f"{MODULE_DIR}/{MODULE_FILES[dep][0]}" for dep in deps)
        dep_lines.append(f"{MODULE_DIR}/{filename}:" + (f" {dep_paths}" if dep_paths else ""))
    entries.append(File(f"{base}/modules.dep", "\n".join(dep_lines) + "\n", mode=0o644))
    index = {name: line for name, line in zip(MODULE_FILES, dep_lines, strict=True)}
    entries.append(File(f"{base}/modules.dep.bin", kmod_index(index), mode=0o644))
    aliases = {
        alias: name
        for name in MODULE_FILES
        for key, alias in modinfo_fields(name, node.driver_version, release)
        if key == "alias"
    }
    alias_lines = "".join(f"alias {alias} {name}\n" for alias, name in aliases.items())
    entries.append(File(f"{base}/modules.alias", "# Aliases extracted from modules themselves.\n" + alias_lines))
    # libkmod looks aliases up normalised ('-' -> '_'), so depmod stores them that way in the index
    normalised = {alias.replace("-", "_"): name for alias, name in aliases.items()}
    entries.append(File(f"{base}/modules.alias.bin", kmod_index(normalised), mode=0o644))
    return entries


def modinfo_fields(name: str, driver_version: str, release: str) -> list[tuple[str, str]]:
    fields = [("version", driver_version), ("supported", "external"), ("license", "NVIDIA")]
    if name == "nvidia":
        fields += [
            ("firmware", f"nvidia/{driver_version}/gsp_ga10x.bin"),
            ("firmware", f"nvidia/{driver_version}/gsp_tu10x.bin"),
            ("alias", f"char-major-{NVIDIA_MAJOR}-*"),
            ("alias", "pci:v000010DEd*sv*sd*bc06sc80i00*"),
            ("alias", "pci:v000010DEd*sv*sd*bc03sc02i00*"),
            ("alias", "pci:v000010DEd*sv*sd*bc03sc00i00*"),
        ]
        fields += [("parmtype", f"NVreg_{param}:uint") for param, _ in PARAMS]
        fields += [("parmtype", f"NVreg_{param}:charp") for param in STRING_PARAMS]
    depends = ",".join(dep.replace("_", "-") for dep in MODULE_FILES[name][1])
    fields += [
        ("depends", depends),
        ("retpoline", "Y"),
        ("name", name),
        ("vermagic", f"{release} SMP preempt mod_unload modversions "),
    ]
    return fields


def elf_object(fields: list[tuple[str, str]], machine: str) -> bytes:
    """A relocatable ELF64 (little endian) with sections: null, ``.modinfo``, ``.shstrtab``."""
    modinfo = b"".join(f"{key}={value}".encode() + b"\0" for key, value in fields)
    shstrtab = b"\0.modinfo\0.shstrtab\0"
    header_size, section_size = 64, 64
    modinfo_offset = header_size
    shstrtab_offset = modinfo_offset + len(modinfo)
    sections_offset = (shstrtab_offset + len(shstrtab) + 7) & ~7
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)  # 64-bit, little endian, version 1, System V
    header = ident + struct.pack(
        "<HHIQQQIHHHHHH", 1, ELF_MACHINES.get(machine, 0), 1, 0, 0, sections_offset, 0,
        header_size, 0, 0, section_size, 3, 2,
    )
    body = bytearray(header + modinfo + shstrtab)
    body += bytes(sections_offset - len(body))
    body += bytes(section_size)  # the null section
    body += struct.pack("<IIQQQQIIQQ", 1, SHT_PROGBITS, SHF_ALLOC, 0, modinfo_offset, len(modinfo), 0, 0, 1, 0)
    body += struct.pack("<IIQQQQIIQQ", 10, SHT_STRTAB, 0, 0, shstrtab_offset, len(shstrtab), 0, 0, 1, 0)
    return bytes(body)


# libkmod's trie index (libkmod-index.c): big-endian words; a node is [prefix\0][first last child
# offsets...][value count, (priority, value\0)...], flagged in the top bits of the offset naming it.
INDEX_MAGIC = 0xB007F457
INDEX_VERSION = 0x00020001
NODE_PREFIX, NODE_VALUES, NODE_CHILDS = 0x80000000, 0x40000000, 0x20000000


def kmod_index(values: dict[str, str]) -> bytes:
    """The ``modules.*.bin`` index mapping each key to one value (priority in insertion order)."""
    out = bytearray(12)
    keys = [(key, priority, value) for priority, (key, value) in enumerate(values.items())]
    root = _write_node(out, keys)
    struct.pack_into(">III", out, 0, INDEX_MAGIC, INDEX_VERSION, root)
    return bytes(out)


def _write_node(out: bytearray, keys: list[tuple[str, int, str]]) -> int:
    prefix = os.path.commonprefix([key for key, _, _ in keys])  # noqa: RUF071 - a string prefix is meant
    rest = [(key[len(prefix):], priority, value) for key, priority, value in keys]
    here = [(priority, value) for key, priority, value in rest if not key]
    groups: dict[str, list[tuple[str, int, str]]] = {}
    for key, priority, value in rest:
        if key:
            groups.setdefault(key[0], []).append((key[1:], priority, value))
    children = {char: _write_node(out, group) for char, group in sorted(groups.items())}  # children first
    offset = len(out)
    flags = 0
    if prefix:
        flags |= NODE_PREFIX
        out += prefix.encode() + b"\0"
    if children:
        flags |= NODE_CHILDS
        first, last = min(children), max(children)
        out += first.encode() + last.encode()
        for code in range(ord(first), ord(last) + 1):
            out += struct.pack(">I", children.get(chr(code), 0))
    if here:
        flags |= NODE_VALUES
        out += struct.pack(">I", len(here))
        for priority, value in here:
            out += struct.pack(">I", priority) + value.encode() + b"\0"
    return flags | offset
