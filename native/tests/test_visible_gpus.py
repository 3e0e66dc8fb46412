"""A process sees only the GPUs whose device nodes it sees, as with the real driver: a pod given two of a node's
eight GPUs has /dev/nvidiactl and two /dev/nvidia<minor>, and nvidia-smi (-L, -q, topo -m), pynvml, events and
the setters all show those two, indexed 0 and 1 in the node's order, with their own minor numbers and identities."""
from __future__ import annotations

import re
import sys
from pathlib import Path

from conftest import consumers, nvml_env
from gpu_container import require_namespaces, run, setup_script
from test_node_runtime import topo_rows

PYNVML = """
import sys
sys.path.insert(0, {tests!r})
import pynvml as N
from mkstate import make_state, write_state
N.nvmlInit()
handles = [N.nvmlDeviceGetHandleByIndex(i) for i in range(N.nvmlDeviceGetCount())]
print("uuids", *[N.nvmlDeviceGetUUID(h) for h in handles])
print("minors", *[N.nvmlDeviceGetMinorNumber(h) for h in handles])
print("indices", *[N.nvmlDeviceGetIndex(h) for h in handles])
try:
    N.nvmlDeviceGetHandleByUUID({hidden!r})
    print("hidden found")
except N.NVMLError_NotFound:
    print("hidden not-found")
events = N.nvmlEventSetCreate()
for h in handles:
    N.nvmlDeviceRegisterEvents(h, N.nvmlEventTypeXidCriticalError, events)
write_state({state!r}, make_state("h100", events=[(1, 0, 79), (2, 7, 48)]))
got = N.nvmlEventSetWait_v2(events, 5000)
print("event", N.nvmlDeviceGetIndex(got.device), got.eventData)
try:
    N.nvmlEventSetWait_v2(events, 300)
    print("another event")
except N.NVMLError_Timeout:
    print("no other event")
"""


def sections(out: str) -> dict[str, str]:
    parts = re.split(r"^== (\w+)\n", out, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_a_process_given_two_of_eight_gpus_sees_those_two(tmp_path, lib_dir, state_file):
    require_namespaces()
    smi = consumers.require("nvidia-smi", version="550")
    consumers.pynvml()
    state = state_file("h100")
    pairs = dict(line.split("=", 1) for line in state.read_text().splitlines() if "=" in line)
    uuid, bus = ([pairs[f"device.{i}.{key}"] for i in range(8)] for key in ("uuid", "pci.bus_id"))
    (tmp_path / "watch.py").write_text(PYNVML.format(tests=str(Path(__file__).parent), hidden=uuid[0],
                                                     state=str(state)))
    script = setup_script(tmp_path / "w", None, minors=[4, 7]) + f"""
echo '== list'; {smi} -L
echo '== query'; {smi} -q
echo '== topo'; {smi} topo -m
echo '== set'; {smi} -i 1 -pl 500; {smi} -i 1 -mig 1; {smi} mig -i 1 -cgi 19 -C
echo '== mig'; {smi} -L
echo '== pynvml'; {sys.executable} {tmp_path / 'watch.py'}
"""
    done = run(script, nvml_env(lib_dir, state))
    assert done.returncode == 0, done.stdout + done.stderr
    out = sections(done.stdout)
    assert out["list"].splitlines() == [f"GPU 0: NVIDIA H100 80GB HBM3 (UUID: {uuid[4]})",
                                        f"GPU 1: NVIDIA H100 80GB HBM3 (UUID: {uuid[7]})"]
    query = out["query"]
    assert re.search(r"Attached GPUs\s+: 2\n", query), query
    assert re.findall(r"Minor Number\s+: (\d+)", query) == ["4", "7"]
    assert re.findall(r"^GPU (\S+)$", query, flags=re.M) == [bus[4], bus[7]]
    rows = topo_rows(out["topo"])
    assert set(rows) == {"GPU0", "GPU1"} and rows["GPU0"]["GPU1"] == "NV18" and rows["GPU1"]["GPU0"] == "NV18"
    mig = out["mig"].splitlines()
    assert mig[:2] == out["list"].splitlines() and "MIG 1g.10gb" in mig[2] and len(mig) == 3, out["mig"]
    record = state.with_name("mokka-nvml.settings").read_text()
    assert "device.7.power.limit_mw=500000\n" in record and "device.7.mig.compute_instances=" in record, record
    assert not re.search(r"^device\.[0-6]\.", record, flags=re.M), record  # the node's index, never the visible one
    said = {line.split()[0]: line.split(maxsplit=1)[1] for line in out["pynvml"].splitlines()}
    assert said["uuids"] == f"{uuid[4]} {uuid[7]}" and said["minors"] == "4 7" and said["indices"] == "0 1"
    assert said["hidden"] == "not-found" and said["event"] == "1 48" and said["no"] == "other event", said


def test_without_nvidiactl_every_gpu_is_listed(tmp_path, lib_dir, state_file):
    """Device nodes without /dev/nvidiactl (no driver's view of /dev at all): the state file's GPUs, all of them."""
    require_namespaces()
    smi = consumers.require("nvidia-smi", version="550")
    state = state_file("h100")
    script = setup_script(tmp_path / "w", None, minors=[4]) + f"rm /dev/nvidiactl\n{smi} -L\n"
    done = run(script, nvml_env(lib_dir, state))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("UUID: GPU-") == 8
