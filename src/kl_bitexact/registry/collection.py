"""Which files the suite runner collects, read from its source by AST, never by running it
(pure).

sglang's test/run_suite.py builds its file list from `glob.glob(os.path.join(...),
recursive=True)` calls whose paths start at `__file__` (`script_dir`, `repo_root =
os.path.dirname(script_dir)`), filtered in a comprehension by `not f.endswith(...)`
conditions: `test/registered/**/*.py` minus conftest.py, __init__.py and `*/cpu/utils.py`,
plus `python/sglang/jit_kernel/tests/**/test_*.py` and `.../benchmark/**/bench_*.py`.
This module evaluates those expressions symbolically: names assigned by plain assignments,
`__file__`, `os.path.{join,dirname,abspath,realpath,normpath}`, `pathlib.Path(...)` with
`.parent`, `.resolve()`, `/`, `.glob()` / `.rglob()`, string constants and f-strings of
known names. Anything else makes the whole list unknown (the caller then keeps its
configured globs and says so), never a guess.
"""

from __future__ import annotations

import ast
import posixpath
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Root:
    """One glob the runner collects, with the exclusions that apply to its files."""

    pattern: str  # repository-relative, `**` as in paths.matches
    exclude: tuple[str, ...] = ()


class _Unknown(Exception):
    """An expression the reader does not evaluate."""


_PATH_FUNCTIONS = {"abspath", "realpath", "normpath"}
# Stands for the repository root in evaluated paths: only a path derived from `__file__`
# is known; a relative one depends on the working directory.
_ROOT = "\x01"
_GLOBS = {"glob", "iglob"}


def read(tree: ast.Module, runner: str) -> tuple[Root, ...] | str:
    """The roots `runner` (its repository path) collects, or why they cannot be read."""
    calls = sorted(
        (node for node in ast.walk(tree) if isinstance(node, ast.Call) and _is_glob(node)),
        key=lambda call: (call.lineno, call.col_offset),
    )
    if not calls:
        return "it calls no glob.glob / Path.glob / Path.rglob"
    names = _assignments(tree)
    try:
        excludes = _comprehension_filters(tree)
    except _Unknown as problem:
        return str(problem)
    roots = []
    for call in calls:
        try:
            pattern = _glob_pattern(call, names, runner)
        except _Unknown as problem:
            return f"line {call.lineno}: {problem}"
        if not pattern.startswith(_ROOT + "/"):
            return f"line {call.lineno}: a glob not under the repository ({pattern.lstrip(_ROOT)})"
        roots.append(Root(pattern.removeprefix(_ROOT + "/"), excludes.get(id(call), ())))
    return tuple(dict.fromkeys(roots))


def _is_glob(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return False
    func = node.func
    module = isinstance(func.value, ast.Name) and func.value.id == "glob"
    return (module and func.attr in _GLOBS) or (not module and func.attr in ("glob", "rglob"))


def _assignments(tree: ast.Module) -> dict[str, ast.expr]:
    """Every `name = expr` in the file (a name assigned twice is ambiguous: left out)."""
    found: dict[str, ast.expr] = {}
    twice: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                if target.id in found:
                    twice.add(target.id)
                found[target.id] = node.value
    return {name: value for name, value in found.items() if name not in twice}


def _glob_pattern(call: ast.Call, names: dict[str, ast.expr], runner: str) -> str:
    func = call.func
    assert isinstance(func, ast.Attribute)
    if isinstance(func.value, ast.Name) and func.value.id == "glob":
        if not call.args:
            raise _Unknown("glob.glob() without a pattern")
        recursive = any(
            k.arg == "recursive" and isinstance(k.value, ast.Constant) and k.value.value is True
            for k in call.keywords
        )
        pattern = _path(call.args[0], names, runner, 0)
        return pattern if recursive else pattern.replace("**", "*")
    base = _path(func.value, names, runner, 0)
    if not call.args or not isinstance(call.args[0], ast.Constant):
        raise _Unknown(f"{func.attr}() without a literal pattern")
    tail = str(call.args[0].value)
    return _join(base, f"**/{tail}" if func.attr == "rglob" else tail)


def _path(node: ast.expr, names: dict[str, ast.expr], runner: str, depth: int) -> str:
    """A repository-relative path (or glob) the expression evaluates to."""
    if depth > 20:
        raise _Unknown("a path built too deep to follow")

    def again(inner: ast.expr) -> str:
        return _path(inner, names, runner, depth + 1)

    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        if node.id == "__file__":
            return f"{_ROOT}/{runner}"
        if node.id in names:
            return again(names[node.id])
        raise _Unknown(f"the name {node.id!r} has no single assignment")
    if isinstance(node, ast.JoinedStr):
        return "".join(
            str(v.value) if isinstance(v, ast.Constant) else again(v.value)
            for v in node.values
            if isinstance(v, (ast.Constant, ast.FormattedValue))
        )
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Div, ast.Add)):
        left, right = again(node.left), again(node.right)
        return _join(left, right) if isinstance(node.op, ast.Div) else left + right
    if isinstance(node, ast.Attribute) and node.attr == "parent":
        return _dirname(again(node.value))
    if isinstance(node, ast.Call):
        return _call_path(node, again)
    raise _Unknown(f"{ast.unparse(node)[:60]!r} is not a path it can follow")


def _call_path(node: ast.Call, again: Callable[[ast.expr], str]) -> str:
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    args = node.args
    if name == "join" and args:
        parts = [again(arg) for arg in args]
        path = parts[0]
        for part in parts[1:]:
            path = _join(path, part)
        return path
    if name == "dirname" and len(args) == 1:
        return _dirname(again(args[0]))
    if name in _PATH_FUNCTIONS and len(args) == 1:
        return again(args[0])
    if name in ("Path", "PurePath") and len(args) == 1:
        return again(args[0])
    if name in ("resolve", "absolute") and isinstance(func, ast.Attribute) and not args:
        return again(func.value)
    raise _Unknown(f"{ast.unparse(node)[:60]!r} is not a path it can follow")


def _join(base: str, part: str) -> str:
    if part.startswith("/"):
        raise _Unknown(f"an absolute path ({part})")
    return posixpath.normpath(posixpath.join(base, part)) if base else part


def _dirname(path: str) -> str:
    return posixpath.dirname(path)


def _comprehension_filters(tree: ast.Module) -> dict[int, tuple[str, ...]]:
    """Exclusions of `[f for f in glob.glob(...) if not f.endswith(X) and ...]`, by the id
    of the glob call; a condition other than `not NAME.endswith(...)` is unknown."""
    found: dict[int, tuple[str, ...]] = {}
    for node in ast.walk(tree):
        if not isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
            continue
        for generator in node.generators:
            if _is_glob(generator.iter):
                found[id(generator.iter)] = _excluded(generator)
    return found


def _excluded(generator: ast.comprehension) -> tuple[str, ...]:
    target = generator.target.id if isinstance(generator.target, ast.Name) else None
    conditions: list[ast.expr] = []
    for condition in generator.ifs:
        if isinstance(condition, ast.BoolOp) and isinstance(condition.op, ast.And):
            conditions += condition.values
        else:
            conditions.append(condition)
    excluded: list[str] = []
    for condition in conditions:
        suffixes = _not_endswith(condition, target)
        if suffixes is None:
            raise _Unknown(f"line {condition.lineno}: a filter other than `not f.endswith(...)`")
        excluded += [
            f"**/{suffix.lstrip('/')}" if suffix.startswith("/") else f"**/*{suffix}"
            for suffix in suffixes
        ]
    return tuple(excluded)


def _not_endswith(node: ast.expr, target: str | None) -> list[str] | None:
    if not (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)):
        return None
    call = node.operand
    if not (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == "endswith"
        and isinstance(call.func.value, ast.Name)
        and call.func.value.id == target
        and len(call.args) == 1
    ):
        return None
    value = call.args[0]
    items = value.elts if isinstance(value, ast.Tuple) else [value]
    if not all(isinstance(i, ast.Constant) and isinstance(i.value, str) for i in items):
        return None
    return [str(i.value) for i in items if isinstance(i, ast.Constant)]
