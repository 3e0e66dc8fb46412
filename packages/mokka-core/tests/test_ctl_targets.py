"""nvml-mock-ctl names GPUs as lists and ranges wherever it names one (0,2  0-3  all  a UUID or bus id)."""

from __future__ import annotations

import json

import pytest

from mokka_core import CtlError, Node
from mokka_core.stage.native import native_dir

if native_dir() is None:
    pytest.skip("mock libnvidia-ml not built (make -C native install)", allow_module_level=True)


@pytest.fixture(scope="module")
def node():
    with Node("t4", gpus=4) as staged:
        yield staged


def temperatures(node: Node) -> list[int]:
    return [gpu["temperature_c"] for gpu in json.loads(node.ctl("status", "--json"))["gpus"]]


def test_lists_ranges_and_identities_combine(node: Node) -> None:
    node.ctl("temp", "all", "30")
    assert node.ctl("temp", "1-2", "80") == "ok: GPU 1, GPU 2 temperature 80 C"
    assert temperatures(node) == [30, 80, 80, 30]
    uuid = json.loads(node.ctl("status", "--json"))["gpus"][3]["uuid"]
    assert node.ctl("temp", f"0,{uuid},0", "50") == "ok: GPU 0, GPU 3 temperature 50 C"  # each GPU once
    assert temperatures(node) == [50, 80, 80, 50]


def test_every_verb_that_names_gpus_takes_a_list(node: Node) -> None:
    node.ctl("fail", "0,3", "lost")
    health = [gpu["health"] for gpu in json.loads(node.ctl("status", "--json"))["gpus"]]
    assert health == ["lost", "healthy", "healthy", "lost"]
    node.ctl("reset", "0-3")
    assert all(gpu["health"] == "healthy" for gpu in json.loads(node.ctl("status", "--json"))["gpus"])


@pytest.mark.parametrize(("target", "message"), [
    ("3-1", "GPU range '3-1' runs backwards"),
    ("0,,1", "empty GPU in '0,,1'"),
    ("2-5", "no GPU '4' on this node"),
])
def test_bad_lists_are_refused_naming_the_part(node: Node, target: str, message: str) -> None:
    before = temperatures(node)
    with pytest.raises(CtlError, match=message):
        node.ctl("temp", target, "99")
    assert temperatures(node) == before
