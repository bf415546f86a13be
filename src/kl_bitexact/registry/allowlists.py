"""The suites CI knows: sglang's dict literals in test/run_suite.py (read by AST) and
kl-bitexact's own YAML allowlist.

sglang validates every registration against `PER_COMMIT_SUITES`, `NIGHTLY_SUITES` and
`OTHER_SUITES` (each keyed by backend); one test naming an unknown suite fails validation
for every suite, which broke all of its CI twice.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from kl_bitexact.errors import ConfigError
from kl_bitexact.registry import yamlio

PER_COMMIT = "PER_COMMIT_SUITES"
NIGHTLY = "NIGHTLY_SUITES"
OTHER = "OTHER_SUITES"
PYTHON_DICTS = (PER_COMMIT, NIGHTLY, OTHER)
# kl-bitexact's YAML allowlist: `suites:` (per commit) and `nightly:`, lists of names.
YAML_LISTS = ("suites", "nightly")


@dataclass(frozen=True)
class AllowlistEntry:
    suite: str
    backend: str | None  # None: the YAML allowlist, valid for every backend
    group: str  # the dict (PER_COMMIT_SUITES, ...) or YAML list (suites, nightly) it is in
    file: str
    line: int


@dataclass(frozen=True)
class Allowlist:
    entries: tuple[AllowlistEntry, ...] = ()

    def allows(self, suite: str, backend: str) -> bool:
        return (suite, backend) in self._pairs or (suite, None) in self._pairs

    @cached_property
    def _pairs(self) -> frozenset[tuple[str, str | None]]:
        return frozenset((entry.suite, entry.backend) for entry in self.entries)

    def __add__(self, other: Allowlist) -> Allowlist:
        return Allowlist(self.entries + other.entries)


def read_python(source: str, path: str) -> Allowlist:
    """Entries of the module-level suite dicts; non-literal items are ignored (sglang too)."""
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as problem:
        raise ConfigError(f"{path}:{problem.lineno}: not valid Python ({problem.msg})") from None
    except (RecursionError, MemoryError):
        raise ConfigError(f"{path}: nested too deep for Python's parser to read") from None
    entries: list[AllowlistEntry] = []
    for name, mapping in suite_dicts(tree):
        for key, value in zip(mapping.keys, mapping.values, strict=True):
            backend = backend_of(key)
            if backend is not None and isinstance(value, (ast.List, ast.Tuple, ast.Set)):
                entries.extend(_literal_entries(value.elts, backend, name, path))
    return Allowlist(tuple(entries))


def suite_dicts(tree: ast.Module) -> Iterable[tuple[str, ast.Dict]]:
    """(name, dict literal) for each top-level assignment of one of PYTHON_DICTS."""
    for statement in tree.body:
        target, value = assignment(statement)
        if target in PYTHON_DICTS and isinstance(value, ast.Dict):
            yield target, value


def assignment(statement: ast.stmt) -> tuple[str | None, ast.expr | None]:
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
        target = statement.targets[0]
        return (target.id if isinstance(target, ast.Name) else None), statement.value
    if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
        return statement.target.id, statement.value
    return None, None


def backend_of(key: ast.expr | None) -> str | None:
    """`HWBackend.CUDA`, `"cuda"` or `CUDA` as a key all mean backend "cuda"."""
    if isinstance(key, ast.Attribute):
        return key.attr.lower()
    if isinstance(key, ast.Constant) and isinstance(key.value, str):
        return key.value.lower()
    if isinstance(key, ast.Name):
        return key.id.lower()
    return None


def _literal_entries(
    items: list[ast.expr], backend: str, group: str, path: str
) -> list[AllowlistEntry]:
    return [
        AllowlistEntry(item.value, backend, group, path, item.lineno)
        for item in items
        if isinstance(item, ast.Constant) and isinstance(item.value, str)
    ]


def read_yaml(text: str, path: str) -> Allowlist:
    document = yamlio.load(text, path)
    if document is None:
        return Allowlist()
    if not isinstance(document, dict):
        raise ConfigError(
            f"{path}:1: the allowlist must be a mapping with `suites:` and/or `nightly:` lists",
            hint="write `suites: [suite-a, suite-b]`",
        )
    entries: list[AllowlistEntry] = []
    for group in YAML_LISTS:
        entries.extend(_yaml_entries(document, group, path))
    return Allowlist(tuple(entries))


def _yaml_entries(document: Any, group: str, path: str) -> list[AllowlistEntry]:
    items = document.get(group)
    if items is None:
        return []
    if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
        raise ConfigError(
            f"{path}:{yamlio.key_line(document, group)}: `{group}` must be a list of suite names",
            hint=f"write `{group}: [suite-a, suite-b]`",
        )
    return [
        AllowlistEntry(str(item), None, group, path, yamlio.item_line(items, index) or 1)
        for index, item in enumerate(items)
    ]
