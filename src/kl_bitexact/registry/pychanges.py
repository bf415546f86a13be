"""Which tests of a registered Python test file are new or changed against the base revision
(pure: two sources in, units out; nothing is imported or executed).

The proof of new tests (docs/suites.md) runs these with the base revision's engine. A unit
is a pytest node id prefix, as fine as the source allows:

- `path::Class::test_method` or `path::test_function`: a test whose own definition is new or
  differs, the rest of the file unchanged;
- `path::Class`: a new class, one whose setup differs (bases, decorators, class attributes,
  `setUpClass`, helpers: anything but its test methods), or one deriving from a class of the
  file that changed - its tests may come from a mixin the source cannot list;
- `path`: a new file, a file the base cannot parse, or a change outside the test classes and
  functions (imports, constants, helper functions and classes), which may touch every test.

Sources are compared parsed, with docstrings dropped, so comments, formatting and docs do not
count; nor do the registration calls (`register_cuda_ci(...)`: where and how long a file runs)
and the `if __name__ == "__main__":` block (pytest never runs it).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import TypeGuard

from kl_bitexact.registry.scan import REGISTER_FUNCTIONS
from kl_bitexact.suite.changes import Change

NEW = "new"
CHANGED = "changed"
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


@dataclass
class _Class:
    context: str  # everything but the test methods
    methods: dict[str, str]  # test method name -> its definition
    bases: tuple[str, ...]  # names of the bases (for in-file inheritance)


@dataclass
class _File:
    context: str = ""  # module statements that are no test, no test class, no registration
    functions: dict[str, str] = field(default_factory=dict)
    classes: dict[str, _Class] = field(default_factory=dict)


def changed_units(path: str, head: str, base: str | None) -> list[Change]:
    """The new and changed units of the head's `path` (source `head`) against the base's
    version (`base`; None: no such file on the base revision, or unreadable there)."""
    before = _parsed(base) if base is not None else None
    if before is None:
        return [Change(path, NEW)]
    after = _parsed(head)
    if after is None or after.context != before.context:
        return [Change(path, CHANGED)]
    changes = [
        Change(f"{path}::{name}", NEW if name not in before.functions else CHANGED)
        for name, definition in after.functions.items()
        if before.functions.get(name) != definition
    ]
    return changes + _class_changes(path, after, before)


def _class_changes(path: str, after: _File, before: _File) -> list[Change]:
    touched: set[str] = set()  # classes with a new or changed test: subclasses change whole
    changes: list[Change] = []
    for name, cls in after.classes.items():
        old = before.classes.get(name)
        if old is None or old.context != cls.context or touched.intersection(cls.bases):
            changes.append(Change(f"{path}::{name}", NEW if old is None else CHANGED))
            touched.add(name)
            continue
        methods = [
            Change(f"{path}::{name}::{method}", NEW if method not in old.methods else CHANGED)
            for method, definition in cls.methods.items()
            if old.methods.get(method) != definition
        ]
        if methods:
            touched.add(name)
        changes += methods
    return changes


def _parsed(source: str) -> _File | None:
    """The file's definitions, or None when it does not parse (or nests too deep for
    Python's parser): then it counts as a whole."""
    try:
        module = ast.parse(source)
        _drop_docstrings(module)
        return _definitions(module)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _drop_docstrings(module: ast.Module) -> None:
    for node in ast.walk(module):
        if isinstance(node, (ast.Module, *_DEFINITIONS)) and _is_docstring(node.body[:1]):
            node.body = node.body[1:] or [ast.Pass()]


def _is_docstring(first: list[ast.stmt]) -> bool:
    return (
        bool(first)
        and isinstance(first[0], ast.Expr)
        and isinstance(first[0].value, ast.Constant)
        and isinstance(first[0].value.value, str)
    )


def _definitions(module: ast.Module) -> _File:
    found = _File()
    context: list[ast.AST] = []
    test_classes: set[str] = set()
    for node in module.body:
        if _is_test(node):
            found.functions[node.name] = ast.dump(node)
        elif isinstance(node, ast.ClassDef) and _is_test_class(node, test_classes):
            test_classes.add(node.name)
            found.classes[node.name] = _class(node)
        elif not _is_registration(node) and not _is_main_block(node):
            context.append(node)
    found.context = _dumped(context)
    return found


def _dumped(nodes: list[ast.AST]) -> str:
    return "\n".join(ast.dump(node) for node in nodes)


def _is_test(node: ast.AST) -> TypeGuard[ast.FunctionDef | ast.AsyncFunctionDef]:
    """What pytest (and unittest, for methods) collects by name: `test*`."""
    return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith(
        "test"
    )


def _is_test_class(node: ast.ClassDef, test_classes: set[str]) -> bool:
    """A class that holds or shapes tests: named Test*, defining test methods, or deriving
    from a *TestCase / *Test* class or from such a class of the file. Any other class
    (a helper, a config holder) is context: its change may touch every test."""
    bases = _base_names(node)
    return (
        node.name.startswith("Test")
        or any(_is_test(item) for item in node.body)
        or any("Test" in base or base in test_classes for base in bases)
    )


def _class(node: ast.ClassDef) -> _Class:
    methods = {item.name: ast.dump(item) for item in node.body if _is_test(item)}
    shape = [*node.decorator_list, *node.bases, *node.keywords]
    shape += [item for item in node.body if not _is_test(item)]
    return _Class(_dumped(shape), methods, _base_names(node))


def _base_names(node: ast.ClassDef) -> tuple[str, ...]:
    """`Base` and `module.Base` as `Base`."""
    names = []
    for base in node.bases:
        if isinstance(base, ast.Name):
            names.append(base.id)
        elif isinstance(base, ast.Attribute):
            names.append(base.attr)
    return tuple(names)


def _is_registration(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Name)
        and node.value.func.id in REGISTER_FUNCTIONS
    )


def _is_main_block(node: ast.stmt) -> bool:
    """`if __name__ == "__main__":` (either operand order)."""
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    test = node.test
    operands = [test.left, *test.comparators]
    names = {o.id for o in operands if isinstance(o, ast.Name)}
    values = {o.value for o in operands if isinstance(o, ast.Constant)}
    return isinstance(test.ops[0], ast.Eq) and names == {"__name__"} and values == {"__main__"}
