"""Which package may import which: the engine executes rounds and knows the algorithms only through their interface
(the round an algorithm owns, the types that cross between them), not any part by name."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "fedrun"
# what the engine may import of fedrun.algorithms: the built algorithm (the package), the interface types and the
# round an algorithm owns
ENGINE_MAY_IMPORT = {"fedrun.algorithms", "fedrun.algorithms.base", "fedrun.algorithms.round"}


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
    sample.write_text("def f():\n    from fedrun.algorithms.harmonizer.harmonize import cosine_matrix\n")
    assert "fedrun.algorithms.harmonizer.harmonize" in imported_modules(sample)
