"""``benchmarks/`` has no import cycle (issue 31): its modules import one another by bare name
(the folder is put on ``sys.path``), at the top or inside functions; every such import counts."""

from __future__ import annotations

import ast
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


def _graph() -> dict[str, set[str]]:
    local = {p.stem for p in BENCH.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in BENCH.glob("*.py"):
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                deps |= {alias.name.partition(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                deps.add(node.module.partition(".")[0])
        graph[path.stem] = (deps & local) - {path.stem}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(name: str, path: list[str]) -> list[str] | None:
        state[name] = 1
        for dep in sorted(graph[name]):
            if state.get(dep) == 1:
                return [*path[path.index(dep) :], dep] if dep in path else [*path, dep]
            if dep not in state and (found := visit(dep, [*path, dep])):
                return found
        state[name] = 2
        return None

    for name in sorted(graph):
        if name not in state and (found := visit(name, [name])):
            return found
    return None


def test_the_benchmark_modules_import_one_another_without_a_cycle():
    graph = _graph()
    assert {"_ops", "_ops_floor", "_ops_first", "_catalog", "_worker", "_proc"} <= set(graph)
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))


def test_the_cycle_finder_finds_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
