"""A profile's boot partition (``mig.layout``): refused at load, naming the file and the key, when it cannot be."""

from __future__ import annotations

from pathlib import Path

import pytest

from mokka_core.errors import ConfigError
from mokka_core.model.spec import NodeSpec
from mokka_core.schema.builtin import builtin_text

H100_MIG_OFF = "    mode_current: disabled\n    mode_pending: disabled\n"


def h100_with(tmp_path: Path, mig: str) -> Path:
    path = tmp_path / "h100-mig.yaml"
    text = builtin_text("h100")
    assert H100_MIG_OFF in text
    path.write_text(text.replace(H100_MIG_OFF, mig, 1))
    return path


def refusal(path: Path, **spec) -> str:
    with pytest.raises(ConfigError) as caught:
        NodeSpec(profile_file=path, **spec).resolve()
    return str(caught.value)


def test_a_layout_resolves_to_the_gpus_config(tmp_path: Path) -> None:
    path = h100_with(tmp_path, "    mode_current: enabled\n    mode_pending: enabled\n    layout: [3g.40gb, 3g.40gb]\n")
    node = NodeSpec(profile_file=path, gpus=2).resolve()
    assert [gpu.config.mig.layout for gpu in node.gpus] == [("3g.40gb", "3g.40gb")] * 2


@pytest.mark.parametrize(("mig", "expected"), [
    ("    mode_current: enabled\n    layout: [3g.40gb, 5g.50gb]\n", "unknown GPU-instance profile '5g.50gb'"),
    ("    mode_current: enabled\n    layout: [3g.40gb, 3g.40gb, 1g.10gb]\n",
     "more than the GPU's 7 compute and 8 memory"),
    ("    mode_current: enabled\n    layout: [4g.40gb, 4g.40gb]\n", "2 x 4g.40gb, the board makes at most 1"),
    ("    mode_current: disabled\n    layout: [3g.40gb]\n", "needs mode_current enabled"),
])
def test_an_impossible_layout_is_refused_naming_file_and_key(tmp_path: Path, mig: str, expected: str) -> None:
    path = h100_with(tmp_path, mig)
    message = refusal(path)
    assert str(path) in message and "device_defaults.mig" in message and "layout" in message
    assert expected in message


def test_a_board_without_mig_refuses_a_layout_in_a_device_entry(tmp_path: Path) -> None:
    path = tmp_path / "l40s-mig.yaml"
    text = builtin_text("l40s")
    devices = text.index("devices:\n") + len("devices:\n")
    first = text.index("\n", devices)
    entry = text[devices:first]
    assert entry.rstrip().endswith("}")
    path.write_text(text[:devices] + entry.rstrip()[:-1] + ", mig: {mode_current: enabled, layout: [1g.12gb]}}"
                    + text[first:])
    message = refusal(path)
    assert str(path) in message and "devices[0].mig" in message and "has no MIG" in message
