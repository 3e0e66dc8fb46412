#!/usr/bin/env python3
"""Generate the state-file key vocabulary from its one source, ``native/state-keys.toml``.

Outputs (all committed; ``native/tests/test_state_keys.py`` fails when one is stale):

* ``native/src/state_keys.inc``: the ``{key, type, offset, size, aux}`` descriptor tables
  ``state.c`` includes;
* ``packages/mokka-core/src/mokka_core/stage/nvml_keys.py``: per-scope key sets and one constant
  per key (``stage/nvml_key_lookup.py``, written by hand, routes full keys through them);
* ``native/README.md``: the key tables between the ``state-keys`` markers.

``mokka.h`` supplies the index limits and the header line.  ``--out-dir D`` writes the outputs
under ``D`` (same relative paths, README included) instead of in place.
"""
from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TABLE = Path("native/state-keys.toml")
MOKKA_H = Path("native/src/mokka.h")
C_OUT = Path("native/src/state_keys.inc")
PY_OUT = Path("packages/mokka-core/src/mokka_core/stage/nvml_keys.py")
README = Path("native/README.md")
BEGIN = "<!-- state-keys: generated from native/state-keys.toml by `make -C native keys`; edit the table, not this -->"
END = "<!-- /state-keys -->"
SCOPES = ("system", "device", "link", "process", "migprofile", "event", "pcifn")
TYPES = {"u32": "T_U32", "i32": "T_I32", "u64": "T_U64", "str": "T_STR", "u8list": "T_U8LIST", "cpuset": "T_CPUSET"}
README_TYPES = {"u8list": "list", "cpuset": "cpus"}
KEY_RE = re.compile(r"[a-z0-9_.]+")
PLACEHOLDER_RE = re.compile(r"<([a-z_]+)>")
REGENERATE = "make -C native keys"


class TableError(ValueError):
    pass


@dataclass(frozen=True)
class Entry:
    """One row of the table: a key, or a key family with placeholders."""

    scope: str
    key: str
    type: str
    field: str
    doc: str
    default: str | None
    aux: str | None  # u8list: count member; cpuset: flag member
    max: str | None  # numbers: the highest value the library takes, a number or a mokka.h MK_ limit
    expand: dict[str, list[str] | dict[str, str]]

    def expanded(self) -> list[tuple[str, str]]:
        """(key, field) of every key of the row, placeholders nested left to right."""
        names = PLACEHOLDER_RE.findall(self.key)
        choices = []
        for name in names:
            values = self.expand[name]
            if isinstance(values, list):
                choices.append([(v, str(i)) for i, v in enumerate(values)])
            else:
                choices.append(list(values.items()))
        out = []
        for combo in itertools.product(*choices):
            key, field = self.key, self.field
            for name, (in_key, in_field) in zip(names, combo, strict=True):
                key = key.replace(f"<{name}>", in_key)
                field = field.replace(f"<{name}>", in_field)
            out.append((key, field))
        return out


@dataclass(frozen=True)
class Scope:
    name: str
    prefix: str
    limits: dict[str, str]
    struct: str
    table: str
    title: str
    entries: tuple[Entry, ...]


def load(root: Path) -> list[Scope]:
    data = tomllib.loads((root / TABLE).read_text())
    scopes = []
    for name in SCOPES:
        s = data["scope"][name]
        entries = tuple(_entry(name, row) for row in data.get(name, []))
        seen: set[str] = set()
        for entry in entries:
            for key, _ in entry.expanded():
                if key in seen:
                    raise TableError(f"{TABLE}: {name} key {key!r} twice")
                seen.add(key)
        scopes.append(Scope(name, s["prefix"], dict(s.get("limits", {})), s["struct"], s["table"], s["title"],
                            entries))
    unknown = set(data) - {"scope", *SCOPES}
    if unknown:
        raise TableError(f"{TABLE}: unknown sections {sorted(unknown)}")
    return scopes


def _entry(scope: str, row: dict[str, object]) -> Entry:
    where = f"{TABLE}: {scope} key {row.get('key')!r}"
    allowed = {"key", "type", "field", "doc", "default", "count", "flag", "expand", "max"}
    if set(row) - allowed:
        raise TableError(f"{where}: unknown attributes {sorted(set(row) - allowed)}")
    for required in ("key", "type", "field", "doc"):
        if not isinstance(row.get(required), str) or not row[required]:
            raise TableError(f"{where}: {required} must be a non-empty string")
    key, type_, field = str(row["key"]), str(row["type"]), str(row["field"])
    if type_ not in TYPES:
        raise TableError(f"{where}: type {type_!r} is not one of {', '.join(TYPES)}")
    aux_name = {"u8list": "count", "cpuset": "flag"}.get(type_)
    for name in ("count", "flag"):
        if (name in row) != (name == aux_name):
            raise TableError(f"{where}: `{name}` belongs to type {'u8list' if name == 'count' else 'cpuset'} only, "
                             f"and that type needs it")
    if "max" in row and (type_ not in ("u32", "u64") or not isinstance(row["max"], (int, str))):
        raise TableError(f"{where}: max belongs to u32 and u64 keys, a number or a mokka.h MK_ limit")
    expand = row.get("expand", {})
    assert isinstance(expand, dict)
    names = PLACEHOLDER_RE.findall(key)
    if sorted(names) != sorted(expand) or len(set(names)) != len(names):
        raise TableError(f"{where}: placeholders {names} and expand.{sorted(expand)} differ")
    for name in names:
        if f"<{name}>" not in field:
            raise TableError(f"{where}: field {field!r} does not use <{name}>")
    entry = Entry(scope, key, type_, field, str(row["doc"]),
                  None if row.get("default") is None else str(row["default"]),
                  None if aux_name is None else str(row[aux_name]), None if "max" not in row else str(row["max"]),
                  expand)
    for full, _ in entry.expanded():
        if not KEY_RE.fullmatch(full):
            raise TableError(f"{where}: {full!r} has a character outside [a-z0-9_.]")
    return entry


def mokka_h(root: Path) -> tuple[dict[str, int], tuple[str, str]]:
    text = (root / MOKKA_H).read_text()
    limits = {m[1]: int(m[2]) for m in re.finditer(r"^#define (MK_\w+) (\d+)\b", text, re.M)}
    magics = []
    for name in ("MK_STATE_MAGIC", "MK_SETTINGS_MAGIC"):
        magic = re.search(rf'^#define {name} "([^"]+)"', text, re.M)
        if magic is None:
            raise TableError(f"{MOKKA_H}: no {name}")
        magics.append(magic[1])
    return limits, (magics[0], magics[1])


def array_sizes(root: Path, limits: dict[str, int]) -> dict[tuple[str, str], int]:
    """(struct, member) -> element count of every array member in mokka.h (`char name[96]`,
    `uint8_t mig_gi[MK_MAX_GI * 3]`: a product of numbers and MK_ limits)."""
    text = re.sub(r"/\*.*?\*/", "", (root / MOKKA_H).read_text(), flags=re.S)
    sizes = {}
    for struct in re.finditer(r"^struct (\w+) \{(.*?)^\};", text, re.M | re.S):
        for member in re.finditer(r"(\w+)\[(\w+(?:\s*\*\s*\w+)*)\]", struct[2]):
            count = 1
            for factor in re.split(r"\s*\*\s*", member[2]):
                count *= int(factor) if factor.isdigit() else limits[factor]
            sizes[struct[1], member[1]] = count
    return sizes


def bound(scope: Scope, entry: Entry, field: str, sizes: dict[tuple[str, str], int], limits: dict[str, int]) -> int:
    """What the C reader accepts of a sized value: str, the bytes (the buffer holds a NUL too);
    u8list, the entries; cpuset, the CPU ids (every id is below it)."""
    if entry.type == "cpuset":
        return limits["MK_CPUSET_WORDS"] * 64
    member = field.split("[")[0]
    if (scope.struct, member) not in sizes:
        raise TableError(f"{TABLE}: {scope.name} key {entry.key!r}: no array member {member} in struct "
                         f"{scope.struct} ({MOKKA_H})")
    size = sizes[scope.struct, member]
    return size - 1 if entry.type == "str" else size


# ---- C --------------------------------------------------------------------------------------------

C_HEAD = f"""\
/* Generated from native/state-keys.toml by native/tools/gen_state_keys.py ({REGENERATE}): do not edit.
 * The descriptor tables of state.c: {{key, type, offset, size, aux}} per key of each scope. */
#define MK_KEY_NUM(s, t, k, f) {{k, t, offsetof(struct s, f), 0, 0}}
#define MK_KEY_STR(s, k, f) {{k, T_STR, offsetof(struct s, f), sizeof(((struct s *)0)->f), 0}}
#define MK_KEY_U8LIST(s, k, f, n) \\
    {{k, T_U8LIST, offsetof(struct s, f), sizeof(((struct s *)0)->f) / sizeof(((struct s *)0)->f[0]), \\
     offsetof(struct s, n)}}
#define MK_KEY_CPUSET(s, k, f, flag) {{k, T_CPUSET, offsetof(struct s, f), 0, offsetof(struct s, flag)}}
#define MK_KEY_MAX(s, t, k, f, m) {{k, t, offsetof(struct s, f), 0, 0, m}}
"""


def render_c(scopes: list[Scope]) -> str:
    out = [C_HEAD]
    for scope in scopes:
        out.append(f"\nstatic const struct desc {scope.table}[] = {{ /* {scope.prefix}<key> */\n")
        for entry in scope.entries:
            for key, field in entry.expanded():
                s = scope.struct
                if entry.type == "str":
                    line = f'MK_KEY_STR({s}, "{key}", {field})'
                elif entry.type == "u8list":
                    line = f'MK_KEY_U8LIST({s}, "{key}", {field}, {entry.aux})'
                elif entry.type == "cpuset":
                    line = f'MK_KEY_CPUSET({s}, "{key}", {field}, {entry.aux})'
                elif entry.max is not None:
                    line = f'MK_KEY_MAX({s}, {TYPES[entry.type]}, "{key}", {field}, {entry.max})'
                else:
                    line = f'MK_KEY_NUM({s}, {TYPES[entry.type]}, "{key}", {field})'
                out.append(f"    {line},\n")
        out.append("};\n")
    return "".join(out)


# ---- Python ---------------------------------------------------------------------------------------



def _q(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _const_name(scope: str, key: str) -> str:
    return f"{scope.upper()}_{key.upper().replace('.', '_')}"


SIZED = ("str", "u8list", "cpuset")
RANGES = {"u32": (0, 2**32 - 1), "i32": (-(2**31), 2**31 - 1), "u64": (0, 2**64 - 1), "u8list": (0, 255)}


def render_py(scopes: list[Scope], limits: dict[str, int], magic: tuple[str, str],
              sizes: dict[tuple[str, str], int]) -> str:
    out = [f'"""The NVML state-file keys (format: native/README.md).\n\n'
           f"Generated from native/state-keys.toml by native/tools/gen_state_keys.py ({REGENERATE}): do not edit.\n"
           '"""\n\nfrom __future__ import annotations\n\nfrom types import MappingProxyType\n\n'
]
    out.append(f"HEADER = {_q(magic[0])}\n")
    out.append(f"# first line of the setter record (device-scope keys NVML setters changed; stage/nvml_settings.py)\n"
               f"SETTINGS_HEADER = {_q(magic[1])}\n")
    scope_limits = {}
    for scope in scopes:
        for placeholder in PLACEHOLDER_RE.findall(scope.prefix)[-1:]:
            scope_limits[scope.name] = limits[scope.limits[placeholder]]
    out.append("# index limits (mokka.h): device.<i> < device, device.<i>.nvlink.<l> < link, ...\n")
    out.append("LIMITS = MappingProxyType({" + ", ".join(f"{_q(k)}: {v}" for k, v in scope_limits.items()) + "})\n")
    names = []
    for scope in scopes:
        var = f"{scope.name.upper()}_TYPES"
        names.append(scope.name)
        out.append(f"\n# {scope.prefix}<key>: {scope.title}; key -> value type\n{var} = MappingProxyType({{\n")
        for entry in scope.entries:
            for key, _ in entry.expanded():
                out.append(f"    {_q(key)}: {_q(entry.type)},\n")
        out.append("})\n")
        out.append(f"{scope.name.upper()}_KEYS = frozenset({var})\n")
        out.append("# sized keys -> the bound the library accepts (str: UTF-8 bytes, u8list: entries, cpuset: ids <)\n"
                   f"{scope.name.upper()}_SIZES: MappingProxyType[str, int] = MappingProxyType({{\n")
        for entry in scope.entries:
            if entry.type in SIZED:
                for key, field in entry.expanded():
                    out.append(f"    {_q(key)}: {bound(scope, entry, field, sizes, limits)},\n")
        out.append("})\n")
    out.append("\n# numeric types -> the (lowest, highest) value the library accepts (u8list: of each entry)\n")
    out.append("RANGES = MappingProxyType({\n")
    out.extend(f"    {_q(t)}: ({lo}, {hi}),\n" for t, (lo, hi) in RANGES.items())
    out.append("})\n")
    out.append("\n# numeric keys the library bounds below their type's range -> (scope, key) -> the highest value\n")
    out.append("MAXIMA = MappingProxyType({\n")
    for scope in scopes:
        for entry in scope.entries:
            if entry.max is not None:
                top = int(entry.max) if entry.max.isdigit() else limits[entry.max]
                out.extend(f"    ({_q(scope.name)}, {_q(key)}): {top},\n" for key, _ in entry.expanded())
    out.append("})\n")
    for what in ("KEYS", "TYPES", "SIZES"):
        out.append(f"\n{what} = MappingProxyType({{\n")
        out.extend(f"    {_q(n)}: {n.upper()}_{what},\n" for n in names)
        out.append("})\n")
    out.append("\n# one constant per key that is not part of a family (families: see *_KEYS)\n")
    seen: dict[str, str] = {}
    for scope in scopes:
        for entry in scope.entries:
            if entry.expand:
                continue
            name = _const_name(scope.name, entry.key)
            if name in seen:
                raise TableError(f"{TABLE}: constant {name} for both {seen[name]} and {scope.name}.{entry.key}")
            seen[name] = f"{scope.name}.{entry.key}"
            out.append(f"{name} = {_q(entry.key)}\n")
    return "".join(out)


# ---- README ---------------------------------------------------------------------------------------

def _md(text: str) -> str:
    return text.replace("|", "\\|")


def render_readme_block(scopes: list[Scope]) -> str:
    out = [BEGIN, "\n"]
    total = sum(len(e.expanded()) for s in scopes for e in s.entries)
    out.append(f"{total} keys. Defaults in brackets (a key not written keeps its default; no bracket: 0 or empty). "
               "A family's key lists its alternatives; its field takes the position of a listed value or the named "
               "member.\n")
    for scope in scopes:
        n = sum(len(e.expanded()) for e in scope.entries)
        out.append(f"\n### `{scope.prefix}*`: {scope.title}\n{n} keys, in `struct {scope.struct}`.\n\n")
        out.append("| key | type | field | meaning |\n|---|---|---|---|\n")
        for entry in scope.entries:
            key, field = entry.key, entry.field
            for name, values in entry.expand.items():
                if isinstance(values, list):
                    key = key.replace(f"<{name}>", "<" + "|".join(values) + ">")
                    field = field.replace(f"<{name}>", f"0–{len(values) - 1}")
                else:
                    key = key.replace(f"<{name}>", "<" + "|".join(values) + ">")
                    field = field.replace(f"<{name}>", "<" + "|".join(values.values()) + ">")
            shown = f"`{_md(key)}`" + (f" [{entry.default}]" if entry.default is not None else "")
            type_ = README_TYPES.get(entry.type, entry.type) + (f" ≤ `{entry.max}`" if entry.max else "")
            if entry.aux:
                field += f"` (+ `{entry.aux}`)"
            else:
                field += "`"
            out.append(f"| {shown} | {type_} | `{_md(field)} | {_md(entry.doc)} |\n")
    out.append(END)
    return "".join(out)


def render_readme(text: str, scopes: list[Scope]) -> str:
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise TableError(f"{README}: markers {BEGIN!r} ... {END!r} not found")
    return text[:start] + render_readme_block(scopes) + text[end + len(END):]


def outputs(root: Path) -> dict[Path, str]:
    scopes = load(root)
    limits, magic = mokka_h(root)
    for scope in scopes:
        for placeholder, limit in scope.limits.items():
            if limit not in limits:
                raise TableError(f"{TABLE}: scope {scope.name}: limit {limit} (<{placeholder}>) not in {MOKKA_H}")
    sizes = array_sizes(root, limits)
    return {C_OUT: render_c(scopes), PY_OUT: render_py(scopes, limits, magic, sizes),
            README: render_readme((root / README).read_text(), scopes)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=ROOT, help="repository root (inputs)")
    ap.add_argument("--out-dir", type=Path, help="write the outputs under this directory instead of in place")
    a = ap.parse_args(argv)
    try:
        generated = outputs(a.root)
    except (TableError, KeyError, tomllib.TOMLDecodeError) as exc:
        print(f"gen_state_keys: {exc}", file=sys.stderr)
        return 1
    out_dir = a.out_dir or a.root
    for rel, text in generated.items():
        path = out_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
