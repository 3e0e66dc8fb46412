"""The profile reference: every key of the profile format with its type, default, unit, description and
who reads it, read off the models (``mokka profile describe``, ``mokka profile docs`` > docs/profile.md).

A key's description is its field's docstring in :mod:`.profile`; a unit is written there as a last
sentence ``Unit: MHz.`` (``Unit: MHz; also 1980MHz, 1.98GHz.`` where human forms are accepted).
``devices[]`` entries take every ``device_defaults`` key, listed once.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterator, Mapping
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from ..errors import MokkaError
from .profile import DeviceConfig, DeviceEntry, Profile

UNIT = re.compile(r"\s*Unit: (?P<unit>[^;]+?)(?:; also (?P<forms>.+))?\.$")
#: how the description of a key Mokka refuses (nvml-mock format, shown by no NVML call or file) starts
REFUSED = "Refused (an error):"

#: who reads a key, by the longest matching path prefix ("*." matches device_defaults. and devices[].)
READERS: dict[str, str] = {
    "version": "mokka (the loader)",
    "name": "mokka profile list",
    "description": "mokka profile list",
    "system": "gpu: nvidia-smi, pynvml, /proc/driver/nvidia/version",
    "system.gpudirect": "gpu: lsmod, /sys/module (the GPU Operator validator's nvidia-fs, gdrcopy, nvidia-peermem)",
    "*": "gpu: nvidia-smi, pynvml (the NVML state file)",
    "*.pci": "pci: lspci, sysfs; gpu: nvidia-smi (PCI), pynvml",
    "*.failure": "gpu: nvidia-smi, pynvml; pci: lspci (config space); the kernel log",
    "*.xid_events": "gpu: pynvml nvmlEventSetWait, the kernel log (/dev/kmsg)",
    "*.failure.after_calls": "gpu: each process's NVML (nvidia-smi, pynvml), counting its calls on the GPU",
    "*.failure.probability": "gpu: each process's NVML (nvidia-smi, pynvml), drawing on each call on the GPU",
    "*.failure.seed": "gpu: each process's NVML (nvidia-smi, pynvml), drawing on each call on the GPU",
    "*.gpm": "gpu: nvidia-smi dmon --gpm-metrics, DCGM profiling, pynvml nvmlGpm* (the NVML GPM API)",
    "*.features": "gpu: pynvml nvmlSystemGetConfComputeCapabilities (confidential_compute); the others are refused",
    "*.fabric": "gpu: nvidia-smi -q (Fabric), pynvml nvmlDeviceGetGpuFabricInfo; fabricmanager: state auto",
    "*.nvlink_error": "nvlink: nvidia-smi nvlink -e, pynvml NVLink error counters",
    "*.processes": "gpu: nvidia-smi (Processes), pynvml process lists",
    "devices[].uuid": "gpu: nvidia-smi -L, pynvml; cdi: the CDI spec",
    "devices[].minor_number": "gpu: /dev/nvidia<N>, nvidia-smi; cdi: the CDI spec",
    "devices[].index": "mokka (which GPU the entry is for)",
    "nvlink": "nvlink: nvidia-smi nvlink, nvidia-smi topo -m, pynvml NVLink calls",
    "nvlink.switches": "pci: lspci (NVSwitch functions); nvlink: the fabric",
    "pcie_topology": "pci: lspci, sysfs numa_node/local_cpulist; gpu: nvidia-smi topo -m, CPU affinity",
    "infiniband": "ib: ibstat, ibv_devices, /sys/class/infiniband",
    "dynamic_metrics_defaults": "gpu: nvidia-smi, pynvml (readings that vary over time)",
}


class Key(NamedTuple):
    path: str  # device_defaults.power.default_limit_mw, devices[].uuid, nvlink.switches[].bdf
    type: str
    default: str
    unit: str
    description: str
    readers: str


def all_keys() -> list[Key]:
    """Every key of the profile format, in document order (leaves and blocks)."""
    return list(_walk(Profile, ""))


def describe(path: str) -> Key:
    """The key at ``path`` (``devices[0].pci.bus_id`` and ``devices.pci.bus_id`` mean ``devices[].pci.bus_id``)."""
    wanted = _canonical(path)
    for key in all_keys():
        if key.path == wanted:
            return key
    if wanted.startswith("devices[]."):
        return describe("device_defaults." + wanted.removeprefix("devices[]."))._replace(path=wanted)
    raise MokkaError(f"{path}: no such profile key (mokka profile docs lists them all)")


def example(path: str, profiles: Mapping[str, str]) -> str:
    """The key as the first of ``profiles`` (name: YAML text) that sets it writes it (flow style); "" if none."""
    import yaml

    parts = path.split(".")
    for name, text in profiles.items():
        value: Any = yaml.safe_load(text)
        for part in parts:
            if part.endswith("[]"):
                value = value.get(part[:-2]) if isinstance(value, dict) else None
                value = value[0] if isinstance(value, list) and value else None
            else:
                value = value.get(part) if isinstance(value, dict) else None
        if value is not None:
            text = yaml.safe_dump({parts[-1].removesuffix("[]"): value}, default_flow_style=True, width=10**6)
            return f"{text.strip()[1:-1]}   ({name}.yaml)"
    return ""


def markdown() -> str:
    """docs/profile.md."""
    lines = ["# Profile keys", "",
             "<!-- generated by `mokka profile docs > docs/profile.md` from the profile models; edit their "
             "docstrings in packages/mokka-core/src/mokka_core/schema/profile.py, not this -->", "",
             "Every key of a Mokka profile (the nvml-mock profile format). `devices[]` entries take every",
             "`device_defaults` key as well, for one GPU. `mokka profile describe KEY.PATH` shows one key with",
             "an example; `mokka profile schema` prints the JSON Schema (descriptions included) for editors.", ""]
    section = None
    for key in all_keys():
        top = key.path.split(".")[0].removesuffix("[]")
        heading = f"`{top}`" if "." in key.path or key.type.endswith("block") else "Top level"
        if heading != section:
            section = heading
            lines += ["", f"## {heading}", "", "| Key | Type | Default | Unit | Read by | Description |",
                      "|---|---|---|---|---|---|"]
        cells = [f"`{key.path}`", key.type, key.default, key.unit, key.readers, key.description]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines) + "\n"


def _walk(model: type[BaseModel], prefix: str) -> Iterator[Key]:
    for name, field in model.model_fields.items():
        if model is DeviceEntry and name in DeviceConfig.model_fields:
            continue  # listed once, under device_defaults
        path = f"{prefix}{name}"
        yield _key(path, field)
        nested = _model_in(field.annotation)
        if nested is not None:
            yield from _walk(nested, f"{path}[]." if _is_list(field.annotation) else f"{path}.")


def _key(path: str, field: FieldInfo) -> Key:
    text = " ".join((field.description or "").split())
    found = UNIT.search(text)
    unit = found.group("unit") if found else ""
    description = text[:found.start()] if found else text
    kind = _type_name(field.annotation, field)
    if found and found.group("forms"):
        kind += f" or {found.group('forms')}"
    return Key(path, kind, _default(field, path), unit, description, _readers(path, text))


def _readers(path: str, description: str) -> str:
    if description.startswith(REFUSED):
        return "nobody: a profile that sets it is refused"
    candidates = [path]
    for device_prefix in ("device_defaults.", "devices[]."):
        if path == device_prefix.rstrip(".[]"):
            candidates.append("*")
        elif path.startswith(device_prefix):
            candidates.append("*." + path.removeprefix(device_prefix))
            candidates.append("*")
    best = ""
    for candidate in candidates:
        for prefix in READERS:
            if (candidate == prefix or candidate.startswith(prefix + ".") or candidate.startswith(prefix + "[]")) \
                    and len(prefix) > len(best):
                best = prefix
        if best:
            return READERS[best]
    return ""


def _default(field: FieldInfo, path: str) -> str:
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if value is None or value is PydanticUndefined:
        return "-"
    if isinstance(value, BaseModel):
        return "(block)"
    if isinstance(value, list) and not value:
        return "[]"
    if path.endswith("device_id") and isinstance(value, int):
        return f"`0x{value:04x}`"  # PCI ids are written in hex
    return f"`{value}`" if not isinstance(value, str) or value else '`""`'


def _type_name(annotation: Any, field: FieldInfo | None = None) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        bounds = [f"{name} {getattr(meta, attr)}" for meta in args[1:]
                  for attr, name in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))
                  if getattr(meta, attr, None) is not None]
        patterns = [meta.pattern for meta in args[1:] if getattr(meta, "pattern", None)]
        base = _type_name(args[0])
        return base + (f" ({', '.join(bounds)})" if bounds else "") + (" (pattern)" if patterns else "")
    if field is not None and field.metadata:
        return _type_name(typing.Annotated[(annotation, *field.metadata)])
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(arg) for arg in args if arg is not type(None))
    if origin is Literal:
        return "one of " + ", ".join(f"`{value}`" for value in args)
    if origin is list:
        return f"list of {_type_name(args[0])}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "block"
    return getattr(annotation, "__name__", str(annotation))


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _is_list(annotation: Any) -> bool:
    if typing.get_origin(annotation) is list:
        return True
    return any(_is_list(arg) for arg in typing.get_args(annotation))


def _canonical(path: str) -> str:
    path = re.sub(r"\[\d*\]", "[]", path.strip())
    parts, out, model = path.split("."), [], Profile
    for position, part in enumerate(parts):
        name = part.removesuffix("[]")
        field = model.model_fields.get(name) if model is not None else None
        listed = field is not None and _is_list(field.annotation) and position < len(parts) - 1
        out.append(f"{name}[]" if listed else name)
        model = _model_in(field.annotation) if field is not None else None  # type: ignore[assignment]
    return ".".join(out)
