"""Which package may import which: the engine executes rounds and knows the algorithms only through their interface
(the round an algorithm owns, the types that cross between them), not any part by name."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "fedrun"
# what the engine may import of fedrun.algorithms: the built algorithm (the package), the interface types, the round
# an algorithm owns and the names of the parts with states of their own
ENGINE_MAY_IMPORT = {"fedrun.algorithms", "fedrun.algorithms.base", "fedrun.algorithms.round",
                     "fedrun.algorithms.stateful"}


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at module level or inside a function (``from x import y`` gives x, and x.y
    where that is a module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names
                      if (PACKAGE.parent / f"{node.module}.{alias.name}".replace(".", "/")).with_suffix(".py").exists()}
    return found


def test_the_engine_imports_no_algorithm_part():
    reached = {f"{path.relative_to(PACKAGE.parent)}: {module}"
               for path in sorted((PACKAGE / "engine").rglob("*.py"))
               for module in imported_modules(path)
               if module.startswith("fedrun.algorithms") and module not in ENGINE_MAY_IMPORT}
    assert reached == set()


def test_the_rule_sees_an_import_of_a_part_inside_a_function(tmp_path):
    """The check above would miss nothing: a part imported lazily is found."""
    sample = tmp_path / "sample.py"
    sample.write_text("def f():\n    from fedrun.algorithms.harmonizer.gram import cosine_matrix\n")
    assert "fedrun.algorithms.harmonizer.gram" in imported_modules(sample)


def module_graph() -> dict[str, set[str]]:
    """fedrun's modules and the fedrun modules each imports (at module level, inside functions, for type checking)."""
    paths = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        paths[name.removesuffix(".__init__")] = path
    return {name: {m for m in imported_modules(path) if m in paths and m != name} for name, path in paths.items()}


def import_circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iteratively)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.add(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        found.append(frozenset(group))
            elif step not in index:
                index[step] = low[step] = counter
                counter += 1
                stack.append(step)
                on_stack.add(step)
                work.append((step, iter(sorted(graph[step]))))
            elif step in on_stack:
                low[node] = min(low[node], index[step])
    return found


def test_no_import_circle():
    """Also none through the parts' registry: the parts import what their configs derive from
    (algorithms/part_config.py), and the registry (algorithms/schema.py) imports the parts."""
    assert import_circles(module_graph()) == []


def test_the_circle_finder_finds_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_circles(graph) == [frozenset({"a", "b", "c"})]
