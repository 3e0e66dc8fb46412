"""The C files form layers: "file A uses a symbol file B defines" (read with `nm`) has no cycle."""
from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable, Mapping
from itertools import pairwise
from pathlib import Path

import pytest
from conftest import NATIVE

# used by the NVML areas, never using one of them
BOTTOM = {"log", "dynamic", "failure", "levels", "visible", "feed", "state", "util"}


def global_symbols(obj: Path, *flags: str) -> set[str]:
    out = subprocess.run(["nm", *flags, str(obj)], check=True, capture_output=True, text=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


def uses(objects: Mapping[str, Path]) -> dict[str, dict[str, set[str]]]:
    """file -> {other file: the symbols of it that the file uses}"""
    defined = {name: global_symbols(obj, "--defined-only", "--extern-only") for name, obj in objects.items()}
    edges: dict[str, dict[str, set[str]]] = {}
    for name, obj in objects.items():
        undefined = global_symbols(obj, "--undefined-only")
        edges[name] = {other: undefined & syms for other, syms in defined.items() if other != name and undefined & syms}
    return edges


def find_cycle(graph: Mapping[str, Iterable[str]]) -> list[str] | None:
    """A cycle as [a, b, ..., a], or None when the graph is a DAG."""
    done: set[str] = set()
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt in path:
                return [*path[path.index(nxt):], nxt]
            if nxt not in done and (cycle := visit(nxt)):
                return cycle
        path.pop()
        done.add(node)
        return None

    for node in sorted(graph):
        if node not in done and (cycle := visit(node)):
            return cycle
    return None


@pytest.fixture(scope="module")
def objects(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One object per source file, built with the Makefile's flags in a temporary directory."""
    out = tmp_path_factory.mktemp("obj")
    subprocess.run(["make", "-s", "-C", str(NATIVE), "objects", f"OBJ_DIR={out}", f"PYTHON={sys.executable}"],
                   check=True)
    return {obj.stem: obj for obj in sorted(out.glob("*.o"))}


def test_every_source_file_is_built(objects: dict[str, Path]) -> None:
    assert {src.stem for src in (NATIVE / "src").glob("*.c")} <= set(objects)


def test_no_cycle_between_c_files(objects: dict[str, Path]) -> None:
    edges = uses(objects)
    cycle = find_cycle(edges)
    if cycle:
        steps = [f"{a}.c uses {b}.c ({', '.join(sorted(edges[a][b]))})" for a, b in pairwise(cycle)]
        pytest.fail("cycle between C files: " + "; ".join(steps))


def test_bottom_layer_uses_no_nvml_area(objects: dict[str, Path]) -> None:
    edges = uses(objects)
    upward = {f"{a}.c -> {b}.c": sorted(syms)
              for a in BOTTOM for b, syms in edges.get(a, {}).items() if b not in BOTTOM}
    assert not upward


def test_find_cycle() -> None:
    assert find_cycle({"a": ["b"], "b": ["c"], "c": ["a"]}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": ["b"], "b": ["a"], "c": []}) == ["a", "b", "a"]
    assert find_cycle({"a": ["b", "c"], "b": ["c"], "c": []}) is None
