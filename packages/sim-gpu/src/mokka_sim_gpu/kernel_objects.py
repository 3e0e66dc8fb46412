"""Kernel-module files for ``modinfo``: tiny ELF objects carrying a ``.modinfo`` section, plus the indexes.

``modinfo -b ROOT nvidia`` finds the module through ``ROOT/lib/modules/<release>/modules.dep.bin``;
``modprobe -d ROOT -R <modalias>`` (what lspci's "Kernel modules:" asks) through ``modules.alias.bin``.
libkmod reads only these binary indexes; the text files beside them are their twins, as depmod
writes both.  modinfo prints the ``key=value`` strings of the object's ``.modinfo`` section and
nothing else in the object is read, so the object holds only that section and the section names.
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import os
import struct
from pathlib import Path
from typing import TYPE_CHECKING

from mokka_core.stage.paths import user_cache
from mokka_core.stage.store import atomic_write
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


def kernel_object_entries(node: Node, release: str | None = None, machine: str | None = None,
                          host_modules: Path | None = None) -> list[Entry]:
    """The module files and the running kernel's whole module index, the host's modules included.

    ``host_modules``: the host's ``/lib/modules/<release>`` whose index is merged in (default: the
    real one, when it exists), so inside ``mokka run`` modinfo and modprobe still find the host's
    own modules beside ours.
    """
    uname = os.uname()
    release = release or uname.release
    machine = machine or uname.machine
    base = f"lib/modules/{release}"
    entries: list[Entry] = []
    ours = ModuleIndex()
    for name, (filename, deps) in MODULE_FILES.items():
        info = modinfo_fields(name, node.driver_version, release)
        entries.append(File(f"{base}/{MODULE_DIR}/{filename}", elf_object(info, machine), mode=0o644))
        dep_paths = " ".join(f"{MODULE_DIR}/{MODULE_FILES[dep][0]}" for dep in deps)
        ours.deps[name] = f"{MODULE_DIR}/{filename}:" + (f" {dep_paths}" if dep_paths else "")
        ours.aliases += [(alias, name) for key, alias in info if key == "alias"]
    host = host_modules if host_modules is not None else Path("/lib/modules") / release
    files = merged_index_files(ours, host) if (host / "modules.dep").is_file() else ours.files()
    return entries + [File(f"{base}/{name}", content, mode=0o644) for name, content in files.items()]


#: What depmod reads on a host; a change to any of them (by stat) renders the merged index anew.
HOST_INDEX_INPUTS = ("modules.dep", "modules.alias", "modules.symbols", "modules.builtin",
                     "modules.builtin.modinfo", "modules.softdep", "modules.devname")


def merged_index_files(ours: ModuleIndex, host: Path) -> dict[str, str | bytes]:
    """Our index merged over the host's: tens of thousands of keys on a real kernel, so rendered once
    per host index and driver and kept in Mokka's cache (``module-index/``)."""
    stamp = hashlib.sha256(repr((sorted(ours.deps.items()), ours.aliases)).encode())
    for name in HOST_INDEX_INPUTS:
        with contextlib.suppress(OSError):
            st = (host / name).stat()
            stamp.update(f"{host / name}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}".encode())
    cached = user_cache("module-index") / stamp.hexdigest()[:32]
    names = list(ModuleIndex().files())
    with contextlib.suppress(OSError):  # a cache this user may not read: render it here
        if all((cached / name).is_file() for name in names):
            return {name: (cached / name).read_bytes() for name in names}
    files = ours.merged_over(ModuleIndex.read(host)).files()
    with contextlib.suppress(OSError):  # a read-only home only costs the next stage the same work
        cached.mkdir(parents=True, exist_ok=True)
        for name, content in files.items():
            atomic_write(cached / name, content.encode() if isinstance(content, str) else content)
    return files


class ModuleIndex:
    """What depmod writes for a set of modules: the text files and their binary twins libkmod reads.

    libkmod refuses to load any index ("Unable to load libkmod resources", as lspci -k warns)
    unless all of dep, alias, symbols, builtin and builtin.alias are there.
    """

    def __init__(self) -> None:
        self.deps: dict[str, str] = {}  # module name -> its modules.dep line
        self.aliases: list[tuple[str, str]] = []  # (pattern, module)
        self.symbols: list[tuple[str, str]] = []  # (symbol, module)
        self.builtin: list[str] = []  # paths of modules built into the kernel
        self.builtin_modinfo = b""  # NUL-separated module.key=value of the built-in modules
        self.softdep = "# Soft dependencies extracted from modules themselves.\n"
        self.devname = "# Device nodes to trigger on-demand module loading.\n"

    @classmethod
    def read(cls, directory: Path) -> ModuleIndex:
        """The index depmod left in ``directory`` (its text files; missing ones are empty)."""
        def text(name: str) -> str:
            path = directory / name
            return path.read_text(errors="replace") if path.is_file() else ""

        index = cls()
        for line in text("modules.dep").splitlines():
            if ":" in line:
                index.deps[module_name(line.split(":", 1)[0])] = line
        index.aliases = alias_lines(text("modules.alias"))
        index.symbols = [(symbol.removeprefix("symbol:"), module)
                         for symbol, module in alias_lines(text("modules.symbols"))]
        index.builtin = [line for line in text("modules.builtin").splitlines() if line.strip()]
        modinfo = directory / "modules.builtin.modinfo"
        index.builtin_modinfo = modinfo.read_bytes() if modinfo.is_file() else b""
        index.softdep = text("modules.softdep") or index.softdep
        index.devname = text("modules.devname") or index.devname
        return index

    def merged_over(self, host: ModuleIndex) -> ModuleIndex:
        """This index's modules replacing the host's of the same name, the host's others kept."""
        merged = ModuleIndex()
        mine = set(self.deps)
        merged.deps = {**{n: line for n, line in host.deps.items() if n not in mine}, **self.deps}
        merged.aliases = self.aliases + [(a, m) for a, m in host.aliases if module_name(m) not in mine]
        merged.symbols = self.symbols + [(s, m) for s, m in host.symbols if module_name(m) not in mine]
        merged.builtin = host.builtin
        merged.builtin_modinfo = host.builtin_modinfo
        merged.softdep, merged.devname = host.softdep, host.devname
        return merged

    def builtin_aliases(self) -> list[tuple[str, str]]:
        pairs = []
        for record in self.builtin_modinfo.split(b"\0"):
            name, _, rest = record.decode(errors="replace").partition(".")
            key, _, value = rest.partition("=")
            if key == "alias" and value:
                pairs.append((value, name))
        return pairs

    def files(self) -> dict[str, str | bytes]:
        """File name -> content, as ``depmod`` writes them."""
        return {
            "modules.dep": "".join(f"{line}\n" for line in self.deps.values()),
            "modules.dep.bin": kmod_index(list(self.deps.items())),
            "modules.alias": "# Aliases extracted from modules themselves.\n"
                             + "".join(f"alias {a} {m}\n" for a, m in self.aliases),
            # libkmod looks aliases up normalised ('-' -> '_'), so depmod stores them that way
            "modules.alias.bin": kmod_index([(normalise_alias(a), m) for a, m in self.aliases]),
            "modules.symbols": "# Aliases for symbols, used by symbol_request().\n"
                               + "".join(f"alias symbol:{s} {m}\n" for s, m in self.symbols),
            "modules.symbols.bin": kmod_index([(f"symbol:{s}", m) for s, m in self.symbols]),
            "modules.builtin": "".join(f"{path}\n" for path in self.builtin),
            "modules.builtin.bin": kmod_index([(module_name(path), "") for path in self.builtin]),
            "modules.builtin.modinfo": self.builtin_modinfo,
            "modules.builtin.alias.bin": kmod_index([(normalise_alias(a), m) for a, m in self.builtin_aliases()]),
            "modules.softdep": self.softdep,
            "modules.devname": self.devname,
        }


def alias_lines(text: str) -> list[tuple[str, str]]:
    """``alias PATTERN MODULE`` lines (modules.alias, modules.symbols) as (pattern, module)."""
    return [(f[1], f[2]) for f in map(str.split, text.splitlines()) if len(f) == 3 and f[0] == "alias"]


def module_name(path: str) -> str:
    """kernel/fs/ext4/ext4.ko.xz -> ext4; nvidia-drm -> nvidia_drm (how the kernel names modules)."""
    name = path.rsplit("/", 1)[-1]
    for suffix in (".xz", ".zst", ".gz"):
        name = name.removesuffix(suffix)
    return name.removesuffix(".ko").replace("-", "_")


def normalise_alias(alias: str) -> str:
    """'-' -> '_' outside bracket expressions, as libkmod normalises what it looks up."""
    out, in_brackets = [], False
    for char in alias:
        if char == "[":
            in_brackets = True
        elif char == "]":
            in_brackets = False
        out.append("_" if char == "-" and not in_brackets else char)
    return "".join(out)


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


def kmod_index(pairs: list[tuple[str, str]]) -> bytes:
    """The ``modules.*.bin`` index of ``(key, value)`` pairs (a key may repeat; priority in list order)."""
    out = bytearray(12)
    keys = sorted(((key, priority, value) for priority, (key, value) in enumerate(pairs)))
    root = _write_node(out, keys, 0, len(keys), 0) if keys else len(out)  # empty: a root node with nothing
    struct.pack_into(">III", out, 0, INDEX_MAGIC, INDEX_VERSION, root)
    return bytes(out)


def _write_node(out: bytearray, keys: list[tuple[str, int, str]], lo: int, hi: int, depth: int) -> int:
    """Write the node for sorted ``keys[lo:hi]``, which share their first ``depth`` characters."""
    first, last = keys[lo][0], keys[hi - 1][0]  # sorted: their common prefix is everyone's
    end = depth + len(os.path.commonprefix([first[depth:], last[depth:]]))  # noqa: RUF071 - strings meant
    prefix = first[depth:end]
    here = []
    while lo < hi and len(keys[lo][0]) == end:
        here.append((keys[lo][1], keys[lo][2]))
        lo += 1
    children: dict[str, int] = {}
    while lo < hi:  # children first, each a run of keys with the same next character
        char, start = keys[lo][0][end], lo
        lo = bisect.bisect_left(keys, (keys[lo][0][:end] + chr(ord(char) + 1),), lo, hi)
        children[char] = _write_node(out, keys, start, lo, end + 1)
    offset = len(out)
    flags = 0
    if prefix:
        flags |= NODE_PREFIX
        out += prefix.encode() + b"\0"
    if children:
        flags |= NODE_CHILDS
        low, high = min(children), max(children)
        out += low.encode() + high.encode()
        for code in range(ord(low), ord(high) + 1):
            out += struct.pack(">I", children.get(chr(code), 0))
    if here:
        flags |= NODE_VALUES
        out += struct.pack(">I", len(here))
        for priority, value in sorted(here):
            out += struct.pack(">I", priority) + value.encode() + b"\0"
    return flags | offset
