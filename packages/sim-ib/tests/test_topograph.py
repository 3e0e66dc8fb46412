"""Topograph v1.0.0 (``../shared/consumers``) derives the fabric's tree from ``ibnetdiscover`` on the nodes.

Its ``infiniband-bm`` provider runs ``pdsh -R ssh -N -w NODE sudo ibnetdiscover`` on the nodes of the request
and builds the switch tree from the topology file; the slurm engine prints it as ``topology/tree``
switch lines. Here ``pdsh`` (``pdsh_standin.py``) reaches the simulated nodes through ``mokka-sim-ib exec``
and ``sudo`` runs its command as is (the tests run as root). Needs root, the IB tools and ``../shared``.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from mokka_core.testing.consumers import shared_binary

pytestmark = pytest.mark.usefixtures("ib_tools")

STANDIN = Path(__file__).with_name("pdsh_standin.py")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def topology(topograph: Path, work: Path, roots: dict[str, Path]) -> str:
    """Run topograph's HTTP server with the infiniband-bm provider, ask for the slurm tree of ``roots``' nodes."""
    bin_dir = work / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "pdsh").write_text(f"#!/bin/sh\nexec {sys.executable} {STANDIN} \"$@\"\n")
    (bin_dir / "sudo").write_text('#!/bin/sh\nexec "$@"\n')
    for tool in ("pdsh", "sudo"):
        (bin_dir / tool).chmod(0o755)
    port = free_port()
    config = work / "topograph-config.yaml"
    config.write_text(f"http:\n  port: {port}\n  ssl: false\nprovider: infiniband-bm\nengine: slurm\n"
                      "requestAggregationDelay: 1s\n")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
           "MOKKA_TEST_NODE_ROOTS": json.dumps({name: str(root) for name, root in roots.items()})}
    url = f"http://127.0.0.1:{port}"
    with (work / "topograph.log").open("w") as log, subprocess.Popen(
            [str(topograph), "-c", str(config)], env=env, stdout=log, stderr=subprocess.STDOUT) as server:
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    with urllib.request.urlopen(f"{url}/healthz", timeout=2):
                        break
                except OSError:
                    assert server.poll() is None and time.monotonic() < deadline, (work / "topograph.log").read_text()
                    time.sleep(0.1)
            request = {"provider": {"name": "infiniband-bm"},
                       "engine": {"name": "slurm", "params": {"plugin": "topology/tree"}},
                       "nodes": [{"region": "local", "instances": {name: name for name in roots}}]}
            post = urllib.request.Request(f"{url}/v1/generate", data=json.dumps(request).encode(),
                                          headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(post, timeout=10) as answer:
                uid = answer.read().decode().strip()
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                try:
                    with urllib.request.urlopen(f"{url}/v1/topology?uid={uid}", timeout=10) as answer:
                        if answer.status == 200:
                            return answer.read().decode()
                except urllib.error.HTTPError as error:
                    pytest.fail(f"topograph answered {error.code}: {error.read().decode()}\n"
                                f"{(work / 'topograph.log').read_text()[-3000:]}")
                time.sleep(0.5)
            pytest.fail(f"no topology in time:\n{(work / 'topograph.log').read_text()[-3000:]}")
        finally:
            server.terminate()
            server.wait(timeout=10)
    raise AssertionError("unreachable")


@pytest.mark.parametrize(("profile", "gpus", "rails", "switch_guid", "count"),
                         [("h100", 8, 8, 0xA088C204_00000000, 3), ("gb200", 4, 4, 0x9B88C204_00000000, 2)],
                         ids=["h100", "gb200"])
def test_topograph_derives_the_leaf_and_spine_tree(fabric, tmp_path: Path, profile: str, gpus: int, rails: int,
                                                   switch_guid: int, count: int) -> None:  # type: ignore[no-untyped-def]
    topograph = shared_binary("topograph")
    nodes = [fabric(f"{profile}-node-{i}", profile=profile, gpus=gpus) for i in range(count)]
    tree = topology(topograph, tmp_path / "topograph", {node.name: node.root for node in nodes})
    # README "The fabric": spine k is switch k (GUID switch_guid + 1 + k), leaf (unit 0, rail r) switch rails + r.
    # Every leaf of the unit holds the same nodes, every spine the same leaves: Topograph folds each level
    # to one switch (which one of the equals it keeps is its choice), a two-level tree.
    spines = {f"S-{switch_guid + 1 + k:016x}" for k in range(rails)}
    leaves = {f"S-{switch_guid + 1 + rails + r:016x}" for r in range(rails)}
    lines = tree.strip().splitlines()
    assert len(lines) == 2, tree
    top = re.fullmatch(r"SwitchName=(\S+) Switches=(\S+)", lines[0])
    leaf = re.fullmatch(r"SwitchName=(\S+) Nodes=(\S+)", lines[1])
    assert top is not None and leaf is not None, tree
    assert top[1] in spines and top[2] == leaf[1] and leaf[1] in leaves, tree
    assert leaf[2] == f"{profile}-node-[0-{count - 1}]", tree
