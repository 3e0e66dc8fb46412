"""The package's shape: layers as folders (contracts in the root pyproject), no import circle, a small top level."""

from __future__ import annotations

from pathlib import Path

import pytest

import mokka_core

grimp = pytest.importorskip("grimp")  # import-linter's graph builder (test extra)

PACKAGE = Path(mokka_core.__file__).parent


def import_cycles(graph, modules: set[str]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for start in sorted(modules):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start) & modules)))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        cycles.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child) & modules))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return cycles


def test_no_import_circle() -> None:
    graph = grimp.build_graph("mokka_core")
    modules = {m for m in graph.modules if not m.startswith("mokka_core.cluster.protos.")}
    assert import_cycles(graph, modules) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    class Graph:
        edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}

        def find_modules_directly_imported_by(self, module: str) -> set[str]:
            return self.edges.get(module, set())

    assert import_cycles(Graph(), {"a", "b", "c", "d"}) == [["a", "b", "c"]]


def test_top_level_keeps_at_most_eight_modules() -> None:
    modules = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(modules) <= 8, modules
