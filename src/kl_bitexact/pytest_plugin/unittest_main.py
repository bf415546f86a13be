"""Whether a test file is run by `unittest.main()` (its main block calls it), read from the
file's syntax tree without running it, once per file."""

from __future__ import annotations

import ast
import functools
from pathlib import Path


@functools.cache
def runs_unittest_main(path: Path) -> bool:
    """True when the file's `if __name__ == "__main__":` block calls `unittest.main(...)`
    (or a `main` imported from unittest). A file that cannot be read or parsed: False
    (pytest reports its own error for it)."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return False
    names = _unittest_main_names(tree)
    for block in tree.body:
        if isinstance(block, ast.If) and _is_main_guard(block.test):
            calls = (node for node in ast.walk(block) if isinstance(node, ast.Call))
            if any(_calls_main(call.func, names) for call in calls):
                return True
    return False


def _unittest_main_names(tree: ast.Module) -> set[str]:
    """Local names bound to unittest.main (`from unittest import main [as x]`)."""
    return {
        alias.asname or alias.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module == "unittest"
        for alias in node.names
        if alias.name == "main"
    }


def _is_main_guard(test: ast.expr) -> bool:
    if not isinstance(test, ast.Compare) or len(test.comparators) != 1:
        return False
    sides = [test.left, test.comparators[0]]
    named = any(isinstance(side, ast.Name) and side.id == "__name__" for side in sides)
    main = any(isinstance(side, ast.Constant) and side.value == "__main__" for side in sides)
    return named and main and isinstance(test.ops[0], ast.Eq)


def _calls_main(func: ast.expr, names: set[str]) -> bool:
    if isinstance(func, ast.Attribute):
        return (
            func.attr == "main" and isinstance(func.value, ast.Name) and func.value.id == "unittest"
        )
    return isinstance(func, ast.Name) and func.id in names
