"""The spec's YAML emitter: what PyYAML and Go's readers read back, and the layout PyYAML gave it."""

from __future__ import annotations

import json
import os
import pickle
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mokka_core.model.codec import encode_shared
from mokka_core.model.spec import NodeSpec
from mokka_core.schema.builtin import BUILTIN_PROFILES
from mokka_sim_cdi import spec as cdi
from mokka_sim_cdi.emit import block_yaml

LOADERS = [yaml.SafeLoader, *([yaml.CSafeLoader] if hasattr(yaml, "CSafeLoader") else [])]

EDGE_STRINGS = [
    "0", "1", "1:0", "0:0", "1:20", "190:20:30", "yes", "No", "ON", "off", "y", "N", "true", "False", "null",
    "NULL", "~", "", " ", " lead", "trail ", "a: b", "a:", "a:b", "a::b", "a #b", "#x", "-x", "- x", "-", "--",
    "---", "...", "?", "? x", ":x", "[x]", "{x}", "*x", "&x", "!x", "%x", "@x", "`x", "'x", '"x', "|x", ">x",
    ",x", "x,y", "x\\y", "a\nb", "a\r\nb", "tab\there", "é", "\u2028", "\u2029", "\x7f", "\x85", "\xa0",
    "\ufeff", "\x00", "\x1b", "\U0001F600", "0x1f", "0o17", "017", "0b101", "1_000", "1e3", "1E3", "+1", "-1",
    "1.5", "1.", ".5", ".inf", "-.inf", ".NaN", "NaN", "inf", "2001-12-14", "2001-12-14t21:59:43.10-05:00",
    "12:30:00", "=", "<<", "a=b", "NVIDIA_VISIBLE_DEVICES=void", "/path with space/x", "/dev/nvidia0",
    "0.5.0", "1.2.3.4", "nvidia.com/gpu", "GPU-1b2c3d4e-0000-1111-2222-333344445555",
    "MIG-5e6f7a8b-9999-aaaa-bbbb-ccccddddeeee", "x" * 300,
]


def old_dump(spec: dict) -> str:
    """The spec as ``dump`` wrote it with PyYAML, before the emitter."""

    class NoAliases(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):
        def ignore_aliases(self, data: object) -> bool:
            return True

    return yaml.dump(spec, Dumper=NoAliases, sort_keys=False, default_flow_style=False)


def load_all_ways(text: str) -> list[object]:
    return [yaml.load(text, Loader=loader) for loader in LOADERS]  # safe loaders only


def skeleton(text: str) -> list[str]:
    """Each line's indentation, list dashes and key, its scalar left out."""
    head = re.compile(r"( *(?:- )*)(?:([A-Za-z_][A-Za-z0-9_]*):(?= |$))?")
    return [":".join(filter(None, head.match(line).groups())) for line in text.splitlines()]


def node_specs(h100_partition) -> list[dict]:
    root = Path("/srv/node")
    specs = [cdi.render(NodeSpec(profile=p).resolve(), root) for p in BUILTIN_PROFILES]
    specs.append(cdi.render(NodeSpec(profile="h100", gpus=8).resolve(), root, mig=h100_partition))
    specs.append(cdi.render(NodeSpec(profile="h100").resolve(), Path("/tmp/node root"), failed=True))
    return specs


def test_every_profile_reads_back_and_keeps_pyyamls_layout(h100_partition) -> None:
    for spec in node_specs(h100_partition):
        text = block_yaml(spec)
        assert load_all_ways(text) == [spec] * len(LOADERS)
        before = old_dump(spec)
        assert skeleton(text) == skeleton(before)
        changed = [(old, new) for old, new in zip(before.splitlines(), text.splitlines(), strict=True) if old != new]
        assert all(old.replace("'", "") == new.replace('"', "") for old, new in changed), changed  # only quotes


def test_dump_keeps_its_header_and_plain_forms() -> None:
    spec = cdi.render(NodeSpec(profile="h100", gpus=1).resolve(), Path("/srv/node"))
    text = cdi.dump(spec)
    assert text.startswith("# CDI spec of a simulated NVIDIA GPU node (Mokka sim-cdi); regenerated on every stage\n")
    lines = text.splitlines()
    gpu = spec["devices"][1]["name"]
    for line in ("cdiVersion: 0.5.0", "kind: nvidia.com/gpu", '- name: "0"', f"- name: {gpu}", "- name: all",
                 "  - NVIDIA_VISIBLE_DEVICES=void", "    - path: /dev/nvidia0"):
        assert line in lines


@pytest.mark.parametrize("text", EDGE_STRINGS)
def test_edge_strings_read_back_as_the_same_strings(text: str) -> None:
    doc = {"value": text, "list": [text, [text]], text: text, "nested": {text: [text]}}
    written = block_yaml(doc)
    assert written.isascii()
    assert load_all_ways(written) == [doc] * len(LOADERS)


def random_strings(count: int) -> list[str]:
    rng = random.Random(20240611)
    plainish = "aZy0719/._-+@=:nN"
    wild = plainish + " \t\n\r#?,[]{}&*!|>'\"%`~\\\x00\x07\x1b\x7f\x85\xa0é\u2028\u2029\ufeff中\U0001F600"
    return ["".join(rng.choice(plainish if i % 2 else wild) for _ in range(rng.randrange(0, 12)))
            for i in range(count)]


def test_random_strings_read_back_as_values_and_keys() -> None:
    strings = random_strings(2000)
    doc = {"values": strings, "keys": dict.fromkeys(strings, "v")}
    written = block_yaml(doc)
    assert written.isascii()
    assert load_all_ways(written) == [doc] * len(LOADERS)


#: what YAML 1.2's core schema, YAML 1.1 and Go's yaml packages read as other than a string
NOT_A_STRING_ELSEWHERE = re.compile(
    r"null|Null|NULL|~|true|True|TRUE|false|False|FALSE|[yYnN]|yes|Yes|YES|no|No|NO|on|On|ON|off|Off|OFF|<<|="
    r"|[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+|[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?"  # 1.2
    r"|[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN)"
    r"|[-+]?(0b[01_]+|0x[0-9a-fA-F_]+|[0-9][0-9_]*(:[0-5]?[0-9])*(\.[0-9_]*)?([eE][-+]?[0-9]+)?)"  # 1.1
    r"|[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}([Tt ].*)?"  # timestamps
)


def test_a_string_written_plain_is_a_string_to_yaml_1_2_and_go_readers_too() -> None:
    plain = [s for s in EDGE_STRINGS + random_strings(2000) if not block_yaml({"k": s}).startswith('k: "')]
    assert {"0.5.0", "/dev/nvidia0", "a=b", "nvidia.com/gpu"} <= set(plain)
    assert [s for s in plain if NOT_A_STRING_ELSEWHERE.fullmatch(s)] == []
    assert [s for s in plain if s.endswith(":") or ": " in s or " #" in s or not s.isprintable()] == []


@pytest.mark.consumer
def test_go_cdi_package_reads_every_string_back(tmp_path: Path, cdi_check: Path) -> None:
    """Runtimes read the spec with Go (sigs.k8s.io/yaml): mount options and env values reach the container unchanged."""
    strings = EDGE_STRINGS + random_strings(2000)
    env = [f"K{i}={s}" for i, s in enumerate(strings)]
    edits = {"env": env, "mounts": [{"hostPath": "/srv/x", "containerPath": "/x", "options": strings}]}
    spec = {"cdiVersion": "0.5.0", "kind": "mokka.test/emit", "devices": [{"name": "x", "containerEdits": edits}]}
    (tmp_path / "cdi").mkdir()
    (tmp_path / "cdi" / "emit.yaml").write_text(cdi.dump(spec))
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"ociVersion": "1.0.2", "process": {"env": []}, "mounts": []}))
    result = subprocess.run([str(cdi_check), "inject", str(tmp_path / "cdi"), str(config), "mokka.test/emit=x"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    injected = json.loads(config.read_text())
    assert injected["process"]["env"] == env
    assert [m["options"] for m in injected["mounts"] if m["destination"] == "/x"] == [strings]


def test_empty_containers() -> None:
    assert block_yaml({"a": [], "b": {}, "c": [[], {}]}) == "a: []\nb: {}\nc:\n- []\n- {}\n"
    assert block_yaml({}) == "{}\n"


def test_nested_lists_are_laid_out_as_pyyaml_does() -> None:
    doc = {"a": [["x", "w"], [{"b": ["z"], "c": {"d": "e"}}]], "f": {"g": [{"h": "i"}]}}
    assert block_yaml(doc) == old_dump(doc)
    assert load_all_ways(block_yaml(doc)) == [doc] * len(LOADERS)


@pytest.mark.parametrize(("value", "named"), [
    (1, "int"), (None, "NoneType"), (b"x", "bytes"), (("a",), "tuple"), (True, "bool"), (1.5, "float"),
    ({"a"}, "set"), (Path("/x"), "PosixPath"),
])
def test_any_other_type_is_refused_by_name(value: object, named: str) -> None:
    for doc in ({"k": value}, {"k": ["a", value]}, {"k": [{"j": value}]}, value):
        with pytest.raises(TypeError, match=rf"\b{named}\b"):
            block_yaml(doc)
    with pytest.raises(TypeError, match=rf"\b{named}\b"):
        cdi.dump({"devices": [{"name": value}]})


def test_keys_other_than_str_are_refused() -> None:
    with pytest.raises(TypeError, match=r"key must be str, not int"):
        block_yaml({"a": {1: "b"}})


def test_a_lone_surrogate_is_refused() -> None:
    with pytest.raises(ValueError, match="U\\+D800"):
        block_yaml({"k": "a\ud800"})


def test_planning_a_node_imports_no_yaml(h100_partition) -> None:
    """PyYAML costs ``mokka run`` 15-20 ms; the node comes from the run's cache as JSON, as there."""
    node = NodeSpec(profile="h100", gpus=8).resolve()
    child = """
import pickle, sys
import mokka_sim_cdi.surface
loaded = lambda: sorted(m for m in sys.modules if m.split(".")[0] in ("yaml", "_yaml"))
assert not loaded(), loaded()
from pathlib import Path
from mokka_core.model.codec import decode
from mokka_core.model.node import Node
from mokka_core.stage.surface import StageContext
data = pickle.load(sys.stdin.buffer)
ctx = StageContext(root=Path("/srv/node"), mig=data["mig"])
(entry,) = mokka_sim_cdi.surface.CdiSurface().plan(decode(Node, data["node"]), ctx)
assert b"cdiVersion: 0.5.0" in entry.data() and b"- name: MIG-" in entry.data()
assert not loaded(), loaded()
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    given = pickle.dumps({"node": encode_shared(node), "mig": h100_partition})
    result = subprocess.run([sys.executable, "-c", child], input=given, capture_output=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr.decode()
