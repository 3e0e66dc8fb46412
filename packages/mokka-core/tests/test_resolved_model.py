"""The resolved model: generated from the documents, total, light to import, the same across surfaces."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mokka_core.model.codec import decode, encode, encode_shared
from mokka_core.model.config import GpuConfig
from mokka_core.model.node import Node
from mokka_core.model.spec import NodeSpec
from mokka_core.schema import codegen
from mokka_core.schema.builtin import BUILTIN_PROFILES
from mokka_core.schema.profile import DeviceConfig


def test_the_generated_classes_are_up_to_date() -> None:
    assert codegen.main(["--check"]) == 0, "run: python -m mokka_core.schema.codegen"


def test_every_document_field_has_its_resolved_field() -> None:
    assert GpuConfig.__slots__ == tuple(DeviceConfig.model_fields)


def test_a_gpu_configuration_is_total() -> None:
    config = decode(GpuConfig, {})
    for block in ("pci", "pcie", "clocks", "ecc", "failure", "nvlink_error", "utilization"):
        assert getattr(config, block) is not None, block
    assert (config.pcie.max_link_gen, config.pcie.current_link_gen, config.pcie.current_link_width) == (4, 4, 16)
    assert config.fabric is None and config.dynamic_metrics is None  # a fact about the board, not a default
    # a link trained at its maximum unless the document says otherwise; limits from the default limit
    derived = decode(GpuConfig, {"pcie": {"max_link_gen": 5}, "power": {"default_limit_mw": 700_000}})
    assert derived.pcie.current_link_gen == 5
    assert (derived.power.enforced_limit_mw, derived.power.max_limit_mw) == (700_000, 700_000)


@pytest.mark.parametrize("profile", BUILTIN_PROFILES)
def test_a_node_survives_its_json(profile: str) -> None:
    node = NodeSpec(profile=profile, gpus=3).resolve()
    assert decode(Node, encode(node)) == node


def test_the_resolved_model_imports_no_pydantic() -> None:
    code = ("import sys, mokka_core.model.apply, mokka_core.model.codec, mokka_core.stage.snapshot;"
            "print('pydantic' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_resolved_values_are_immutable() -> None:
    node = NodeSpec(profile="t4", gpus=1).resolve()
    with pytest.raises(AttributeError, match="immutable"):
        node.gpus[0].config.thermal.temperature_gpu_c = 1  # type: ignore[misc]
    warmer = node.gpus[0].config.thermal.replace(temperature_gpu_c=70)
    assert warmer.temperature_gpu_c == 70 and node.gpus[0].config.thermal.temperature_gpu_c != 70


def test_a_node_writes_each_gpu_configuration_once() -> None:
    node = NodeSpec(profile="gb200", gpus=72).resolve()
    data = json.loads(json.dumps(encode_shared(node)))
    assert len(data["configs"]) == len(set(gpu.config for gpu in node.gpus)) < 8
    decoded = decode(Node, data)
    assert decoded == node
    assert len({id(gpu.config) for gpu in decoded.gpus}) == len(data["configs"])  # built once each
