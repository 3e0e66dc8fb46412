"""mokka run's resolve cache: the same node as resolving from the files, and never a stale one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mokka_core.model.codec import encode, encode_shared
from mokka_core.model.spec import NodeSpec
from mokka_core.run import resolved
from mokka_core.schema.builtin import builtin_text

IS_ROOT = os.geteuid() == 0


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MOKKA_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("NODE_NAME", raising=False)
    return tmp_path / "cache" / resolved.CACHE_DIR


def test_a_cached_node_is_the_node_its_files_resolve_to(cache: Path) -> None:
    spec = NodeSpec(profile="h100", gpus=4, surfaces={"fabricmanager": {"state": "failed"}})
    first = resolved.resolve(spec)
    assert len(list(cache.iterdir())) == 1
    again = resolved.resolve(spec)
    assert encode(again.base) == encode(first.base) == encode(spec.resolve())
    assert again.override_doc == first.override_doc == {}
    assert again.fingerprints == spec.inputs().fingerprints
    assert again.base_json == json.loads(json.dumps(encode_shared(spec.resolve())))  # what the snapshot records


def test_a_changed_profile_file_is_read_again(tmp_path: Path) -> None:
    profile = tmp_path / "mine.yaml"
    profile.write_text(builtin_text("h100"))
    spec = NodeSpec(profile_file=profile, gpus=2)
    assert resolved.resolve(spec).base.gpus[0].config.name == "NVIDIA H100 80GB HBM3"
    profile.write_text(builtin_text("h100").replace("NVIDIA H100 80GB HBM3", "NVIDIA H100 TEST", 1) + "\n")
    assert resolved.resolve(spec).base.gpus[0].config.name == "NVIDIA H100 TEST"


def test_each_spec_and_node_name_has_its_own_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    assert len(resolved.resolve(NodeSpec(profile="h100", gpus=2)).base.gpus) == 2
    assert len(resolved.resolve(NodeSpec(profile="h100", gpus=3)).base.gpus) == 3
    monkeypatch.setenv("NODE_NAME", "node-a")
    assert resolved.resolve(NodeSpec(profile="h100", gpus=2)).base.node_name == "node-a"
    monkeypatch.setenv("NODE_NAME", "node-b")
    assert resolved.resolve(NodeSpec(profile="h100", gpus=2)).base.node_name == "node-b"


def test_a_corrupt_or_unwritable_entry_only_costs_time(cache: Path) -> None:
    spec = NodeSpec(profile="a100", gpus=2)
    resolved.resolve(spec)
    (entry,) = cache.iterdir()
    entry.write_text('{"format": 1, "base": ')
    assert len(resolved.resolve(spec).base.gpus) == 2
    entry.unlink()
    cache.rmdir()
    cache.write_text("a file where the cache directory would be")  # unwritable, even for root
    assert len(resolved.resolve(spec).base.gpus) == 2


RUN_IMPORTS = """
import sys
sys.argv = ["mokka", "run", "--profile", "h100", "--gpus", "2", "--", "true"]
from mokka_core.cli.mokka import app, narrowed
try:
    narrowed(app, sys.argv[1:])()  # what main() runs; main() itself ends the process at once after a run
except SystemExit as exc:
    code = exc.code
heavy = {"mokka_core.schema.profile", "mokka_core.schema.loader", "mokka_core.schema.overlays",
         "mokka_core.model.resolve"}
print(code, sorted(heavy & set(sys.modules)))
"""


@pytest.mark.skipif(not IS_ROOT, reason="mokka run needs root here (a mount namespace)")
def test_a_repeated_mokka_run_builds_no_profile_schema() -> None:
    """Building the profile schema's pydantic models is most of a resolve's cost: a run whose node is cached
    (the second) must not load the schema or the resolver."""
    runs = [subprocess.run([sys.executable, "-c", RUN_IMPORTS], capture_output=True, text=True, timeout=120)
            for _ in range(2)]
    assert runs[0].returncode == 0, runs[0].stderr
    assert runs[0].stdout.splitlines()[-1] != "0 []", "the first run should resolve from the files"
    assert runs[1].stdout.splitlines()[-1] == "0 []", runs[1].stdout + runs[1].stderr


def test_a_relative_profile_file_is_the_one_in_the_working_directory(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    for board in ("a100", "h100"):
        (tmp_path / board).mkdir()
        (tmp_path / board / "node.yaml").write_text(builtin_text(board))
    names = []
    for board in ("a100", "h100", "a100"):
        monkeypatch.chdir(tmp_path / board)
        names.append(resolved.resolve(NodeSpec(profile_file=Path("node.yaml"), gpus=1)).base.gpus[0].config.name)
    assert names[0] == names[2] != names[1]
    assert "H100" in names[1]


def test_only_the_newest_entries_are_kept(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resolved, "MAX_ENTRIES", 3)
    for gpus in range(1, 6):
        resolved.resolve(NodeSpec(profile="t4", gpus=gpus))
    kept = sorted(cache.iterdir(), key=lambda entry: entry.stat().st_mtime_ns)
    assert [entry.name for entry in kept] == [f"{resolved.key(NodeSpec(profile='t4', gpus=n))}.json" for n in (3, 4, 5)]
