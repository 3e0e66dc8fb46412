"""The node file: what sim-ib stages for the responder (README "The node file"), and how the responder reads it.

The writer is golden-tested; the reader (native/ib-responder/node.c) gets every truncation of a real file and
garbage, and must refuse each with one line naming the file, never crash, never bind anything.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from mokka_core.model.spec import NodeSpec
from mokka_sim_ib import hca
from mokka_sim_ib.config import NodeConfig, PortModel
from mokka_sim_ib.fabric import FabricLayout
from mokka_sim_ib.responder import command

GOLDEN = Path(__file__).parent / "golden"
CASES = {"node-h100-2gpus.conf": ("h100", 2, "n1", "healthy"), "node-a100-1gpu-failed.conf": ("a100", 1, "gpu-node-7",
                                                                                              "failed")}


def node_file(profile: str, gpus: int, name: str, state: str) -> str:
    node = NodeSpec(profile=profile, gpus=gpus, node_name=name, surfaces={"ib": {"state": state}}).resolve()
    return hca.node_config(node, hca.ports(node)).to_text()


@pytest.mark.parametrize("golden", sorted(CASES))
def test_the_writer_matches_its_golden_file(golden: str) -> None:
    """To accept a deliberate change: regenerate the file with node_file(*CASES[golden]) and review the diff."""
    assert node_file(*CASES[golden]) == (GOLDEN / golden).read_text()


def test_the_writer_refuses_what_a_line_cannot_hold() -> None:
    port = PortModel(node_name="n", hca="mlx5_0", index=0, node_guid=1, port_guid=2, lid=3, sm_lid=1, state=4,
                     phys_state=5, width_active=2, speed_active=1, speed_ext_active=8, cap_mask=0, node_desc="a\nb",
                     device_id=1, revision=0, vendor_id=2)
    with pytest.raises(ValueError, match="control character"):
        NodeConfig("n", 0, 1, 1, (port,), FabricLayout(32, 1, 1, 0)).to_text()


def check(root: Path, text: bytes) -> subprocess.CompletedProcess[str]:
    path = root / "var/lib/mokka/ib/node.conf"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text)
    process = subprocess.Popen([*command(root), "--fabric-dir", str(root / "fabric"), "--listen", "127.0.0.1:0"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = process.communicate(timeout=5)
    except subprocess.TimeoutExpired:  # it serves: a valid file
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=10)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def refused(result: subprocess.CompletedProcess[str], root: Path) -> str:
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)  # not a signal: no crash
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"mokka-ib-responder: {root}/var/lib/mokka/ib/node.conf: "), lines
    assert not (root / "var/lib/mokka/ib/responder.sock").exists() and not (root / "fabric").exists()
    return lines[0]


def test_every_truncation_is_refused(tmp_path: Path) -> None:
    whole = (GOLDEN / "node-h100-2gpus.conf").read_bytes()
    cuts = sorted({*range(0, len(whole), 7), *(i + 1 for i, c in enumerate(whole) if c == ord("\n"))} - {len(whole)})
    for cut in cuts:
        refused(check(tmp_path, whole[:cut]), tmp_path)


@pytest.mark.parametrize(("change", "said"), [
    (lambda t: t.replace("mokka-ib-node 3", "mokka-ib-node 2"), "line 1: not a sim-ib node file"),
    (lambda t: t.replace("lid 16896\n", "lid 65536\n"), "line 15: lid: not a number in range"),
    (lambda t: t.replace("lid 16896\n", "lid -1\n"), "line 15: lid: not a number in range"),
    (lambda t: t.replace("lid 16896\n", "lid 0x\n"), "line 15: lid: not a number in range"),
    (lambda t: t.replace("node_guid 0xa088c2036bb80000", "node_guid 0x1a088c2036bb80000"), "node_guid: not a number"),
    (lambda t: t.replace("lid 16896\n", "lid 16896\nlid 1\n"), "line 16: repeated key lid in a port"),
    (lambda t: t.replace("lid 16896\n", "colour blue\n"), "line 15: unknown key colour in a port"),
    (lambda t: t.replace("lid 16896\n", ""), "port 0 has no lid"),
    (lambda t: t.replace("ports 2", "ports 3"), "\"end\" after 2 of 3 ports"),
    (lambda t: t.replace("ports 2", "ports 1"), "expected \"port 1\" (of 1)"),
    (lambda t: t.replace("ports 2", "ports 257"), "ports: not a count up to 256"),
    (lambda t: t.replace("port 1\n", "port 5\n"), "expected \"port 1\""),
    (lambda t: t.replace("sm_guid 0xa088c20300000001\n", ""), "no sm_guid before the ports"),
    (lambda t: t.replace("node_name n1", "node_name N1"), "node_name is not a DNS-1123 subdomain"),
    (lambda t: t.replace("su_size 32", "su_size 63"), "su_size 63, rails 2, spines 2: a leaf has 64 ports"),
    (lambda t: t.replace("su_size 32", "su_size 0"), "su_size 0, rails 2, spines 2"),
    (lambda t: t.replace("hca mlx5_0", "hca " + "x" * 40), "hca: too long"),
    (lambda t: t.replace("node_desc n1 mlx5_0", "node_desc n1\tmlx5_0"), "node_desc: holds a control character"),
    (lambda t: t + "end\n", "text after \"end\""),
    (lambda t: t.replace("end\n", "end"), "no newline at the end"),
    (lambda t: t.replace("\n", "\r\n"), "not a sim-ib node file"),
    (lambda t: "", "empty"),
    (lambda t: t.replace("sm_lid 1\n", "sm_lid 1\x00\n", 1), "holds a NUL"),
    (lambda t: t.replace("node_desc n1 mlx5_0", "node_desc " + "d" * 2000), "longer than 1024 bytes"),
])
def test_a_malformed_file_is_refused_naming_the_line(tmp_path: Path, change, said: str) -> None:  # type: ignore[no-untyped-def]
    text = change((GOLDEN / "node-h100-2gpus.conf").read_text())
    assert said in refused(check(tmp_path, text.encode()), tmp_path)


def test_garbage_is_refused(tmp_path: Path) -> None:
    whole = bytearray((GOLDEN / "node-h100-2gpus.conf").read_bytes())
    generator = random.Random(7)
    samples = [os.urandom(size) for size in (1, 16, 600, 70000)] + [b"\n" * 100, b"\xff" * (2 << 20)]
    for _ in range(40):  # flipped bytes in a real file
        mutated = bytearray(whole)
        for _ in range(generator.randint(1, 4)):
            mutated[generator.randrange(len(mutated))] = generator.randrange(256)
        samples.append(bytes(mutated))
    for sample in samples:
        result = check(tmp_path, sample)
        if result.returncode != 1:  # a flip may leave a valid file (a digit for a digit): then it serves
            assert result.returncode == 0 and "serving" in result.stdout, (result.returncode, result.stderr)
            continue
        refused(result, tmp_path)


def test_a_missing_file_is_not_staged(tmp_path: Path) -> None:
    result = subprocess.run(command(tmp_path), capture_output=True, text=True, timeout=10)
    assert (result.returncode, result.stderr) == (
        1, f"mokka-ib-responder: {tmp_path}/var/lib/mokka/ib/node.conf: not staged (run `mokka-sim-ib stage` first)\n")


def test_the_readers_survive_fuzzing(tmp_path: Path) -> None:
    """node.c and json.c under ASan+UBSan, in-process: 100000 mutations of the golden files and fabric messages."""
    native = Path(__file__).resolve().parents[3] / "native"
    probe = tmp_path / "probe.c"
    probe.write_text("int main(void) { return 0; }\n")
    if shutil.which("make") is None or subprocess.run(
            [os.environ.get("CC", "gcc"), "-fsanitize=address,undefined", "-o", str(tmp_path / "probe"), str(probe)],
            capture_output=True).returncode != 0:
        pytest.skip("no C compiler with ASan and UBSan")
    result = subprocess.run(["make", "-s", "-C", str(native), "-f", "ib-responder/ib-responder.mk", "ib-responder-fuzz",
                             "IBR_FUZZ_RUNS=100000"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "100000 inputs from 4 seeds, no fault" in result.stdout
