"""The PR's change, reached or not: each changed function with the tests that executed it
(from each test's `reach.changed`) and, when coverage.py measured them, its changed lines
that ran and those that did not."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from msgspec import structs

from kl_bitexact.reach import diff
from kl_bitexact.reach.changes import ChangedCode
from kl_bitexact.results.model import (
    ChangedFunction,
    Changes,
    FunctionReach,
    RanWhen,
    TestResult,
)

MAX_COVERAGE_BYTES = 256 * 1024 * 1024
NOT_MEASURED = (
    "no test ran on a server kl-bitexact launched with probes (servers at a URL, or not "
    "written in Python): nothing is known of which changed functions ran"
)
NO_LINE_DATA = (
    "no probed process saved line data (coverage.py): a server killed before it could save, "
    "or none of the changed files was imported"
)


def changes(
    code: ChangedCode,
    tests: Iterable[TestResult],
    lines: tuple[dict[str, set[int]] | None, str] = (None, "not read yet: the run is going on"),
) -> Changes:
    """`lines`: executed lines per absolute path, or None and why there are none."""
    measured = [t for t in tests if t.reach is not None and t.reach.measured]
    executed, why = lines
    ran: dict[str, list[tuple[str, RanWhen]]] = {}  # each function's (test, when), one pass
    for test in measured:
        for function in _changed(test):
            ran.setdefault(function.name, []).append((test.id, function.when))
    found = tuple(_function(code, f, ran.get(f.name, []), executed) for f in code.functions)
    return Changes(
        code.base,
        code.head,
        found,
        measured=bool(measured),
        why_not="" if measured else NOT_MEASURED,
        lines_why_not="" if executed is not None else why,
    )


def _function(
    code: ChangedCode,
    function: diff.Function,
    ran: list[tuple[str, RanWhen]],
    executed: dict[str, set[int]] | None,
) -> ChangedFunction:
    result = ChangedFunction(
        function.name,
        function.path,
        function.line,
        function.changed,
        tests=tuple(dict.fromkeys(test for test, when in ran if when is RanWhen.TEST)),
        at_startup=any(when is RanWhen.STARTUP for _, when in ran),
    )
    if executed is None:
        return result
    path = str((code.repository / function.path).resolve())
    statements = _statements(Path(path)) & set(function.changed)
    seen = executed.get(path, set())
    return structs.replace(
        result,
        lines_run=tuple(sorted(statements & seen)),
        lines_not_run=tuple(sorted(statements - seen)),
    )


def _changed(test: TestResult) -> tuple[FunctionReach, ...]:
    return test.reach.changed if test.reach is not None else ()


def _statements(path: Path) -> set[int]:
    from coverage.parser import PythonParser

    try:
        parser = PythonParser(filename=str(path))
        parser.parse_source()
    except Exception:  # coverage's parser raises its own errors for unparsable sources
        return set()
    return set(parser.statements)


def executed_lines(reach_dir: Path) -> tuple[dict[str, set[int]] | None, str]:
    """Every line the probes' coverage.py saw run, per absolute path, from all launches
    under `reach_dir` (bounded, regular files only); None and why when there is none."""
    from coverage import CoverageData

    found = [p for p in sorted(reach_dir.glob("*/coverage.*")) if _regular(p)]
    if not found:
        return None, _why_no_lines(reach_dir)
    lines: dict[str, set[int]] = {}
    for part in found:
        data = CoverageData(basename=str(part), no_disk=False)
        with contextlib.suppress(Exception):  # a damaged file (the PR's server wrote it)
            data.read()
            for measured in data.measured_files():
                lines.setdefault(measured, set()).update(data.lines(measured) or ())
    return lines, ""


def _regular(path: Path) -> bool:
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_size <= MAX_COVERAGE_BYTES


def _why_no_lines(reach_dir: Path) -> str:
    for log in sorted(reach_dir.glob("*/hits-*.log")):
        if not _regular(log):
            continue
        with contextlib.suppress(OSError), log.open("rb") as text:
            for line in text.read(1024 * 1024).decode("utf-8", "replace").splitlines():
                if line.startswith("lines\tunavailable\t"):
                    return line.split("\t", 2)[2][:500]
    return NO_LINE_DATA
