"""A small AST mutator for one module of the pure core: each mutant is one operator, constant
or boolean flipped; the given tests run against it, and every mutant they pass is printed.

    python scripts/mutate.py src/kl_bitexact/compare/gate.py tests/compare/test_gate.py ...

mutmut (benchmarks/mutation.py) runs the whole selection of `[tool.mutmut]` for each mutant;
this runs only the tests named, so one module can be checked in minutes (issue 36, item 12).
The module is restored afterwards, also on Ctrl-C.
"""

from __future__ import annotations

import argparse
import ast
import copy
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# A mutation applied in place to the node it was offered for (its type varies by mutation).
Change = Callable[[Any], None]

SWAPS: dict[type, type] = {
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In,
    ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.And: ast.Or, ast.Or: ast.And,
    ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult,
}  # fmt: skip


@dataclass(frozen=True)
class Mutant:
    line: int
    what: str
    tree: ast.Module


def mutants(tree: ast.Module) -> Iterator[Mutant]:
    """One mutant per operator swapped, number nudged, boolean flipped or `not` dropped."""
    for index, node in enumerate(ast.walk(tree)):
        for what, change in _changes(node):
            mutated = copy.deepcopy(tree)
            target = list(ast.walk(mutated))[index]
            change(target)
            yield Mutant(getattr(node, "lineno", 0), what, mutated)


def _changes(node: ast.AST) -> Iterator[tuple[str, Change]]:
    if isinstance(node, ast.Compare):
        for position, op in enumerate(node.ops):
            if type(op) in SWAPS:
                yield f"{type(op).__name__} -> {SWAPS[type(op)].__name__}", _swap_op(position)
    elif isinstance(node, (ast.BoolOp, ast.BinOp)) and type(node.op) in SWAPS:
        yield f"{type(node.op).__name__} -> {SWAPS[type(node.op)].__name__}", _swap_binary
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield "not dropped", _drop_not
    elif isinstance(node, ast.Constant) and isinstance(node.value, bool):
        yield f"{node.value} -> {not node.value}", _flip
    elif isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        yield f"{node.value!r} -> {node.value + 1!r}", _nudge


def _swap_op(position: int) -> Change:
    def change(node: ast.Compare) -> None:
        node.ops[position] = SWAPS[type(node.ops[position])]()

    return change


def _swap_binary(node: ast.BoolOp | ast.BinOp) -> None:
    node.op = SWAPS[type(node.op)]()


def _drop_not(node: ast.UnaryOp) -> None:
    node.op = ast.UAdd()  # +x of a bool is its int: truthiness kept, the `not` gone


def _flip(node: ast.Constant) -> None:
    node.value = not node.value


def _nudge(node: ast.Constant) -> None:
    assert isinstance(node.value, (int, float))  # _changes offers a nudge only for numbers
    node.value = node.value + 1


def survives(module: Path, source: str, mutant: Mutant, tests: list[str], timeout: float) -> bool:
    module.write_text(ast.unparse(ast.fix_missing_locations(mutant.tree)) + "\n")
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider"]
    command += ["--hypothesis-profile=mutation", *tests]
    try:
        done = subprocess.run(command, capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return False
    finally:
        module.write_text(source)
    return done.returncode == 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("module", type=Path)
    parser.add_argument("tests", nargs="+")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--lines", help="only mutants on lines FROM-TO")
    args = parser.parse_args()
    source = args.module.read_text()
    low, _, high = (args.lines or "0-999999").partition("-")
    found = [m for m in mutants(ast.parse(source)) if int(low) <= m.line <= int(high)]
    print(f"{len(found)} mutants of {args.module}", flush=True)
    survivors, started = [], time.monotonic()
    try:
        for number, mutant in enumerate(found, 1):
            if survives(args.module, source, mutant, args.tests, args.timeout):
                survivors.append(mutant)
                print(f"SURVIVED line {mutant.line}: {mutant.what}", flush=True)
            if number % 10 == 0:
                print(f"{number}/{len(found)} ({time.monotonic() - started:.0f} s)", flush=True)
    finally:
        args.module.write_text(source)
    print(f"{len(survivors)} of {len(found)} survived", flush=True)
    return 1 if survivors else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    sys.exit(main())
