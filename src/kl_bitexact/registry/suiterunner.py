"""What the suite runner (sglang's test/run_suite.py) does with a registration, read from its
source by AST (pure): which files it collects (`collection.py`), which backends' suite names
it validates, and its per-file timeouts (none when it defines none).

sglang validates suite names only for the backends in `_SUITE_CHECKED_BACKENDS`: there, one
registration to an unknown suite raises before any test runs, failing every job that runs
the script; elsewhere the file silently never runs. Older versions had no such set and
validated every backend.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from kl_bitexact.registry import allowlists, collection
from kl_bitexact.registry.collection import Root

CHECKED_BACKENDS = "_SUITE_CHECKED_BACKENDS"


@dataclass(frozen=True)
class Semantics:
    checked_backends: frozenset[str] | None  # None: every backend is validated
    # the runner's per-file limit when a run gives none (None: the runner sets none)
    timeout_per_file: float | None = None
    retry_timeout_increase: float = 0.0
    source: str = ""  # where the facts were read ("" : defaults)
    # the files it collects (None: not read from it; `collection_note` says why)
    collection: tuple[Root, ...] | None = None
    collection_note: str = ""

    def validates(self, backend: str) -> bool:
        return self.checked_backends is None or backend in self.checked_backends


def read(source: str, path: str) -> Semantics:
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError:
        return Semantics(None)  # the allowlist reader reports it
    roots = collection.read(tree, path)
    return Semantics(
        checked_backends=_checked_backends(tree),
        timeout_per_file=_option_default(tree, "--timeout-per-file"),
        retry_timeout_increase=_option_default(tree, "--retry-timeout-increase") or 0.0,
        source=path,
        collection=roots if isinstance(roots, tuple) else None,
        collection_note=roots if isinstance(roots, str) else "",
    )


def _checked_backends(tree: ast.Module) -> frozenset[str] | None:
    for statement in tree.body:
        target, value = allowlists.assignment(statement)
        if target == CHECKED_BACKENDS and isinstance(value, (ast.Set, ast.List, ast.Tuple)):
            names = (allowlists.backend_of(item) for item in value.elts)
            return frozenset(name for name in names if name)
    return None


def _option_default(tree: ast.Module, option: str) -> float | None:
    """The literal `default=` of `parser.add_argument("OPTION", ...)` anywhere in the file
    (None: no such option, or no numeric default: argparse gives None, no limit)."""
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "add_argument"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value == option
        ):
            for keyword in node.keywords:
                value = keyword.value.value if isinstance(keyword.value, ast.Constant) else None
                if keyword.arg == "default" and isinstance(value, (int, float)):
                    return float(value)
    return None
