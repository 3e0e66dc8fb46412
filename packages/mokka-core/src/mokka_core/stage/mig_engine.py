"""MIG changes made by the NVML library itself, as nvidia-smi makes them (``nvml-mock-ctl mig``, boot layouts).

The C engine decides placement, ids, capacity and errors (native/src/mig.c) and writes the setter
record under its lock, so a ctl change and an nvidia-smi change are the same change.  The library
fixes its state file at first use in a process, so each request runs in a fresh child (:func:`run`:
``python -m mokka_core.stage.mig_engine LIBRARY STATE REQUEST``, the request as JSON) that answers
one JSON line: ``{"ok": true, "done": [...]}`` or ``{"ok": false, "error": "..."}``.

A request is one operation on one GPU: ``mode`` (``on``), ``create`` (``profiles``: [GPU-instance
profile id, compute-instance profile or null], all or none: what it made is destroyed again if a
later one fails), ``destroy`` (``instances``: GPU instance ids, each with its compute instances;
every id is checked before any is destroyed).
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from ..errors import MokkaError

SUCCESS = 0
CI_PROFILE_COUNT = 8
GI_HANDLES = 8  # a profile has at most 7 instances (nvml.h: the array holds instanceCount handles)


class Placement(ctypes.Structure):
    _fields_ = [("start", ctypes.c_uint), ("size", ctypes.c_uint)]


class GpuInstanceInfo(ctypes.Structure):
    _fields_ = [("device", ctypes.c_void_p), ("id", ctypes.c_uint), ("profileId", ctypes.c_uint),
                ("placement", Placement)]


class Failed(Exception):
    pass


class Nvml:
    def __init__(self, library: str) -> None:
        self.lib = ctypes.CDLL(library)
        self.lib.nvmlErrorString.restype = ctypes.c_char_p
        self.check(self.lib.nvmlInit_v2(), "NVML init")

    def check(self, code: int, what: str) -> None:
        if code != SUCCESS:
            raise Failed(f"{what}: {self.lib.nvmlErrorString(code).decode()}")

    def device(self, index: int) -> ctypes.c_void_p:
        handle = ctypes.c_void_p()
        self.check(self.lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)), f"GPU {index}")
        return handle

    def gpu_instance(self, device: ctypes.c_void_p, gi: int) -> ctypes.c_void_p:
        handle = ctypes.c_void_p()
        self.check(self.lib.nvmlDeviceGetGpuInstanceById(device, gi, ctypes.byref(handle)), f"GPU instance {gi}")
        return handle

    def compute_instances(self, gi: ctypes.c_void_p) -> list[ctypes.c_void_p]:
        found: list[ctypes.c_void_p] = []
        for profile in range(CI_PROFILE_COUNT):
            handles = (ctypes.c_void_p * GI_HANDLES)()
            count = ctypes.c_uint(0)
            if self.lib.nvmlGpuInstanceGetComputeInstances(gi, profile, handles, ctypes.byref(count)) == SUCCESS:
                found += [ctypes.c_void_p(handles[n]) for n in range(count.value)]
        return found

    def destroy(self, gi: ctypes.c_void_p, what: str) -> None:
        for ci in self.compute_instances(gi):
            self.check(self.lib.nvmlComputeInstanceDestroy(ci), f"{what}: destroying its compute instance")
        self.check(self.lib.nvmlGpuInstanceDestroy(gi), what)


def mode(nvml: Nvml, index: int, on: bool) -> list[Any]:
    status = ctypes.c_int(0)
    nvml.check(nvml.lib.nvmlDeviceSetMigMode(nvml.device(index), int(on), ctypes.byref(status)),
               f"GPU {index}: MIG mode")
    return [status.value]  # NVML_SUCCESS: current now; otherwise pending until the GPU is reset


def create(nvml: Nvml, index: int, profiles: list[list[Any]]) -> list[Any]:
    device = nvml.device(index)
    made: list[tuple[ctypes.c_void_p, int, int | None]] = []
    try:
        for profile_id, ci_profile in profiles:
            gi = ctypes.c_void_p()
            nvml.check(nvml.lib.nvmlDeviceCreateGpuInstance(device, profile_id, ctypes.byref(gi)),
                       f"GPU {index}: GPU instance of profile {profile_id}")
            info = GpuInstanceInfo()
            nvml.check(nvml.lib.nvmlGpuInstanceGetInfo(gi, ctypes.byref(info)), "GPU instance info")
            made.append((gi, info.id, None))
            if ci_profile is not None:
                ci = ctypes.c_void_p()
                nvml.check(nvml.lib.nvmlGpuInstanceCreateComputeInstance(gi, ci_profile, ctypes.byref(ci)),
                           f"GPU {index}: compute instance on GPU instance {info.id}")
                made[-1] = (gi, info.id, 0)
    except Failed:
        for gi, gi_id, _ in reversed(made):
            nvml.destroy(gi, f"GPU {index}: undoing GPU instance {gi_id}")
        raise
    return [[gi_id, ci] for _, gi_id, ci in made]


def destroy(nvml: Nvml, index: int, instances: list[int]) -> list[Any]:
    device = nvml.device(index)
    handles = [(gi, nvml.gpu_instance(device, gi)) for gi in instances]
    for gi, handle in handles:
        nvml.destroy(handle, f"GPU {index}: GPU instance {gi}")
    return instances


class Refused(MokkaError):
    """The library refused the change; the partition is as it was."""


def run(library: Path, state: Path, request: dict[str, Any]) -> list[Any]:
    """Carry out ``request`` with ``library`` on the node of ``state``: what it made (raises Refused)."""
    command = [sys.executable, "-m", "mokka_core.stage.mig_engine", str(library), str(state), json.dumps(request)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    try:
        answer = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        why = done.stderr.strip() or f"exit status {done.returncode}"
        raise Refused(f"GPU {request['gpu']}: the NVML worker failed: {why}") from None
    if not answer["ok"]:
        raise Refused(str(answer["error"]))
    return list(answer["done"])


def main(argv: list[str]) -> int:
    library, state, text = argv
    os.environ["MOKKA_NVML_STATE"] = state  # read by the library at first use, which is below
    request = json.loads(text)
    try:
        nvml = Nvml(library)
        match request["op"]:
            case "mode":
                done = mode(nvml, request["gpu"], request["on"])
            case "create":
                done = create(nvml, request["gpu"], request["profiles"])
            case "destroy":
                done = destroy(nvml, request["gpu"], request["instances"])
            case other:
                raise Failed(f"unknown operation {other!r}")
        answer: dict[str, Any] = {"ok": True, "done": done}
    except (Failed, OSError) as exc:
        answer = {"ok": False, "error": str(exc)}
    print(json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
