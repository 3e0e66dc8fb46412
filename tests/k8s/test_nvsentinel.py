"""NVSentinel v1.19.0 (``../shared/consumers``): the syslog health monitor and the metadata collector inside
``mokka run``, as on a GPU node.

The monitor reads the kernel log through journald (built with ``-tags systemd``): a real ``systemd-journald`` runs
in the node's namespace on tmpfs (``/run/log``, ``/run/systemd``; Storage=volatile) and ingests the node's
``/dev/kmsg``. Its HealthEvents go over gRPC to a platform-connector socket: here a stand-in that takes
``HealthEventOccurredV1`` and decodes each event by NVSentinel's documented field numbers
(data-models/protobufs/health_event.proto). The faults are raised with ``nvml-mock-ctl`` as an operator would; what
each must come out as is NVIDIA's: the Xid catalog's resolution for the code (as NVSentinel's own parser tests read
it: 13 and 31 application errors, nothing to do; 48 reset the GPU; 74 with that NVLink message, contact support; 79
restart the machine), the NVSwitch's SXid 20009 non-fatal, and a GPU fallen off the bus fatal. The metadata
collector's file must name the node's GPUs as nvidia-smi does.
"""

from __future__ import annotations

import json
import os
import re
import socket
import threading
from concurrent import futures
from pathlib import Path

import pytest
from conftest import mokka_run

from mokka_core.testing.consumers import ensure_apt, missing, shared_binary

pytestmark = pytest.mark.consumer

JOURNALD = Path("/lib/systemd/systemd-journald")
#: RecommendedAction numbers (NVSentinel docs, "RecommendedAction Enum")
ACTIONS = {0: "NONE", 2: "COMPONENT_RESET", 5: "CONTACT_SUPPORT", 6: "RUN_FIELDDIAG", 15: "RESTART_VM",
           24: "RESTART_BM", 25: "REPLACE_VM", 26: "RUN_DCGMEUD", 27: "CUSTOM", 99: "UNKNOWN"}

#: journald on tmpfs in the node's mount namespace, reading its /dev/kmsg; then CMD
JOURNAL = """
set -e
w=$1; shift
mount -t tmpfs journal /run/systemd
mount -t tmpfs journal /run/log
printf '[Journal]\\nStorage=volatile\\nReadKMsg=yes\\nForwardToSyslog=no\\nForwardToKMsg=no\\nForwardToWall=no\\n' \\
    > "$w/journald.conf"
mount --bind "$w/journald.conf" /etc/systemd/journald.conf
/lib/systemd/systemd-journald > "$w/journald.log" 2>&1 &
for i in $(seq 200); do [ -S /run/systemd/journal/socket ] && break; sleep 0.05; done
exec "$@"
"""

#: the collector (before the faults: a lost GPU fails it, as on a real node); the monitor as its DaemonSet runs it,
#: chrooted into the node's / with the journal at /nvsentinel/var/log/journal (its pod's mount of the host's /var/log);
#: once its first cycles ran (it reports its three checks healthy and starts at the journal's end), the faults;
#: until the connector has EXPECTED more events (or 60 s)
SCENARIO = """
set -e
{collector} -output-path {work}/gpu_metadata.json > {work}/collector.log 2>&1 || true
root={work}/root
mkdir -p $root
mount -t tmpfs monitor $root
for entry in /*; do
  name=${{entry#/}}
  if [ -L "$entry" ]; then ln -s "$(readlink "$entry")" "$root/$name"
  elif [ -d "$entry" ]; then mkdir "$root/$name"; mount --rbind "$entry" "$root/$name"
  fi
done
mkdir -p $root/nvsentinel/var/log/journal
mount --bind /run/log/journal $root/nvsentinel/var/log/journal
chroot $root {monitor} -node-name {node} -platform-connector-socket unix://{socket} \
    -metadata-path {work}/gpu_metadata.json -state-file {work}/state.json -polling-interval 1s -metrics-port {port} \
    -sysfs-root / -cancellations-config {work}/none.toml > {work}/monitor.log 2>&1 &
monitor=$!
for i in $(seq 600); do [ "$(wc -l < {work}/events.jsonl)" -ge 3 ] && break; sleep 0.1; done
sleep 2.5  # a second cycle: the first only seeks the journal's end, the second keeps its cursor
{faults}
for i in $(seq 600); do [ "$(wc -l < {work}/events.jsonl)" -ge $((3 + {expected})) ] && break; sleep 0.1; done
kill $monitor; wait $monitor || true
nvidia-smi --query-gpu=index,uuid,pci.bus_id,serial,name,driver_version --format=csv,noheader || true
"""


# ---- the platform connector: protobuf wire format, decoded by field number -------------------------------------

def fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, value) pairs of one protobuf message: varints as ints, length-delimited as bytes."""
    out, i = [], 0
    while i < len(data):
        key, i = varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = varint(data, i)
        elif wire == 2:
            size, i = varint(data, i)
            value, i = data[i:i + size], i + size
        elif wire == 1:
            value, i = data[i:i + 8], i + 8
        elif wire == 5:
            value, i = data[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wire}")
        out.append((number, value))
    return out


def varint(data: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        byte = data[i]
        i += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, i
        shift += 7


def health_event(data: bytes) -> dict:
    """HealthEvent: 4 checkName, 5 isFatal, 6 isHealthy, 7 message, 8 recommendedAction, 9 errorCode,
    10 entitiesImpacted (Entity: 1 entityType, 2 entityValue), 13 nodeName."""
    event: dict = {"isFatal": False, "isHealthy": False, "recommendedAction": "NONE", "errorCode": [], "entities": []}
    for number, value in fields(data):
        if number == 4:
            event["checkName"] = value.decode()
        elif number == 5:
            event["isFatal"] = bool(value)
        elif number == 6:
            event["isHealthy"] = bool(value)
        elif number == 7:
            event["message"] = value.decode()
        elif number == 8:
            event["recommendedAction"] = ACTIONS.get(value, str(value))
        elif number == 9:
            event["errorCode"].append(value.decode())
        elif number == 10:
            entity = dict(fields(value))
            event["entities"].append((entity.get(1, b"").decode(), entity.get(2, b"").decode()))
        elif number == 13:
            event["nodeName"] = value.decode()
    return event


class Connector:
    """A platform connector on a unix socket: every HealthEvent it is sent, one JSON line each in ``events``."""

    def __init__(self, path: Path, events: Path) -> None:
        import grpc

        self.events = events
        events.write_text("")
        lock = threading.Lock()

        def occurred(request: bytes, context: object) -> bytes:
            with lock, events.open("a") as out:
                for number, value in fields(request):
                    if number == 2:
                        out.write(json.dumps(health_event(value)) + "\n")
            return b""  # google.protobuf.Empty

        class Handler(grpc.GenericRpcHandler):
            def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
                if details.method.endswith("/HealthEventOccurredV1"):
                    return grpc.unary_unary_rpc_method_handler(occurred)
                return None

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), handlers=[Handler()])
        self.server.add_insecure_port(f"unix://{path}")
        self.server.start()

    def received(self) -> list[dict]:
        events = [json.loads(line) for line in self.events.read_text().splitlines()]
        return [{**event, "entities": [tuple(entity) for entity in event["entities"]]} for event in events]

    def stop(self) -> None:
        self.server.stop(grace=None)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def nvsentinel(real_node: None) -> tuple[Path, Path]:
    try:
        import grpc  # noqa: F401  (the platform-connector stand-in)
    except ImportError:
        missing("grpcio is not installed (mokka-core[test] brings it)")
    ensure_apt(["systemd"], present=JOURNALD.exists())  # systemd-journald and libsystemd.so.0
    return shared_binary("syslog-health-monitor"), shared_binary("metadata-collector")


def run_scenario(nvsentinel: tuple[Path, Path], profile: str, faults: list[str], expected: int,
                 tmp_path: Path) -> tuple[list[dict], dict, str]:
    """The monitor's events, the collector's metadata and nvidia-smi's lines, after ``faults`` on ``profile``."""
    monitor, collector = nvsentinel
    work = tmp_path / "work"
    work.mkdir()
    (work / "none.toml").write_text("")
    (tmp_path / "journal.sh").write_text(JOURNAL)
    connector = Connector(tmp_path / "connector.sock", work / "events.jsonl")
    try:
        script = SCENARIO.format(faults="\n".join(f"nvml-mock-ctl {f} > /dev/null" for f in faults),
                                 collector=collector, monitor=monitor, node="gpu-node-7", work=work,
                                 socket=tmp_path / "connector.sock", port=free_port(), expected=expected)
        done = mokka_run(profile, "sh", str(tmp_path / "journal.sh"), str(work), "sh", "-c", script,
                         options=("--node-name", "gpu-node-7"), timeout=180,
                         env={**os.environ, "NODE_NAME": "gpu-node-7"})
        logs = "".join(f"\n--- {p.name}\n{p.read_text()[-3000:]}" for p in work.glob("*.log"))
        assert done.returncode == 0, done.stderr[-3000:] + logs
        metadata = json.loads((work / "gpu_metadata.json").read_text())
        return connector.received(), metadata, done.stdout + logs
    finally:
        connector.stop()


def by_code(events: list[dict]) -> dict[str, dict]:
    return {code: event for event in events for code in event["errorCode"]}


def test_the_monitor_classifies_every_xid_the_node_raises_as_nvidias_catalog(nvsentinel: tuple[Path, Path],
                                                                               tmp_path: Path) -> None:
    faults = ["xid 0 13", "xid 1 31", "fail 2 ecc-uncorrectable", "nvlink-error 3 5 --links 0", "fail 4 fallen-off-bus"]
    events, metadata, report = run_scenario(nvsentinel, "h100", faults, 7, tmp_path)
    assert [(e["checkName"], e["isHealthy"]) for e in events[:3]] == [
        ("SysLogsXIDError", True), ("SysLogsSXIDError", True), ("SysLogsGPUFallenOff", True)], events
    codes = by_code(events[3:])
    uuids = {gpu["pci_address"]: gpu["uuid"] for gpu in metadata["gpus"]}
    expected = {  # code: (fatal, action, the GPU it names)
        "13": (False, "NONE", 0), "31": (False, "NONE", 1), "48": (True, "COMPONENT_RESET", 2),
        "74": (True, "CONTACT_SUPPORT", 3), "79": (True, "RESTART_BM", 4),
    }
    for code, (fatal, action, index) in expected.items():
        event = codes.get(code)
        assert event is not None, (code, events, report)
        assert (event["isFatal"], event["recommendedAction"]) == (fatal, action), (code, event)
        pci = metadata["gpus"][index]["pci_address"]
        assert ("GPU_UUID", uuids[pci]) in event["entities"] or ("GPU", uuids[pci]) in event["entities"], event
        assert event["nodeName"] == "gpu-node-7"
    # the NVSwitch's report of the same link errors: non-fatal, nothing to do
    sxid = codes.get("20009")
    assert sxid is not None and (sxid["isFatal"], sxid["recommendedAction"]) == (False, "NONE"), (events, report)
    # the driver's "fallen off the bus and is not responding" record, a check of its own
    fallen = codes.get("GPU_FALLEN_OFF_BUS")
    assert fallen is not None and (fallen["isFatal"], fallen["recommendedAction"]) == (True, "RESTART_BM"), events
    assert ("PCI", metadata["gpus"][4]["pci_address"]) in fallen["entities"]


def test_the_metadata_collector_describes_the_node_as_nvidia_smi_does(nvsentinel: tuple[Path, Path],
                                                                      tmp_path: Path) -> None:
    events, metadata, report = run_scenario(nvsentinel, "gb200", [], 0, tmp_path)
    assert all(event["isHealthy"] for event in events) and events, events  # a healthy node: its checks pass
    smi = [line.split(", ") for line in report.splitlines() if re.match(r"^\d+, GPU-", line)]
    assert len(smi) == 4, report[-2000:]  # a GB200 tray's four GPUs
    assert [(gpu["gpu_id"], gpu["uuid"], gpu["pci_address"], gpu["serial_number"], gpu["device_name"])
            for gpu in metadata["gpus"]] == [(int(i), uuid, bus.lower()[-12:], serial, name)
                                             for i, uuid, bus, serial, name, _ in smi]
    assert metadata["node_name"] == "gpu-node-7"  # the pod's NODE_NAME (the downward API's spec.nodeName)
    assert {metadata["driver_version"]} == {driver for *_, driver in smi}
