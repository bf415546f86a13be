"""The PR's change as functions (pure): a unified diff's changed lines per file, and the
functions of a Python source those lines fall in, named as the probes name them
(`module:qualname`)."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")
# Modules that are tests or their helpers: they run in the test's process, not the server's.
_TEST_PARTS = frozenset({"test", "tests", "testing"})


@dataclass(frozen=True)
class Function:
    """A function the change touched."""

    name: str  # module:qualname
    path: str  # the file, relative to the repository
    line: int  # its `def` (or first decorator)
    end: int
    changed: tuple[int, ...]  # its lines the change added or edited (the head's numbering)


def changed_lines(diff: str) -> dict[str, set[int]]:
    """Each Python file's changed lines on the head side of `git diff --unified=0`; a pure
    deletion marks the line before it (the code around the hole changed)."""
    files: dict[str, set[int]] = {}
    current: set[int] | None = None
    for line in diff.splitlines():
        if line.startswith("+++ "):
            path = line[4:].strip()
            current = None
            if path.startswith("b/") and path.endswith(".py"):
                current = files.setdefault(path[2:], set())
            continue
        hunk = _HUNK.match(line)
        if hunk and current is not None:
            start, count = int(hunk[1]), int(hunk[2] if hunk[2] is not None else 1)
            current.update(range(start, start + count) if count else (max(start, 1),))
    return {path: lines for path, lines in files.items() if lines}


def module_name(path: str, is_package: Callable[[str], bool]) -> str | None:
    """The dotted module a file is imported as: its directories up to the last one that is
    a package (`is_package(dir)`); None for a file outside a package or a test's module."""
    parts = path.split("/")
    stem = parts[-1].removesuffix(".py")
    top = len(parts) - 1
    while top > 0 and is_package("/".join(parts[:top])):
        top -= 1
    names = parts[top:-1] + ([] if stem == "__init__" else [stem])
    if top == len(parts) - 1 or not names:
        return None
    if any(n in _TEST_PARTS or n.startswith("test_") or n == "conftest" for n in names):
        return None
    return ".".join(names)


def functions(source: str, module: str, path: str, lines: set[int]) -> list[Function]:
    """The module- and class-level functions of `source` that hold a changed line (a
    nested function's change is its enclosing function's: only that one can be named)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    found = []
    for qualname, node in _defs(tree.body, ""):
        start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        end = node.end_lineno or node.lineno
        touched = tuple(sorted(n for n in lines if start <= n <= end))
        if touched:
            found.append(Function(f"{module}:{qualname}", path, start, end, touched))
    return found


def _defs(
    body: list[ast.stmt], prefix: str
) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield f"{prefix}{node.name}", node
        elif isinstance(node, ast.ClassDef):
            yield from _defs(node.body, f"{prefix}{node.name}.")
