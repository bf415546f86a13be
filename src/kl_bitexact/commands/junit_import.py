"""The JUnit import `import-junit` and `pytest` share: pytest's JUnit XML (and console log)
as results, written atomically and listed one line per test. defusedxml loads only here,
when a command imports."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msgspec import structs

from kl_bitexact.compare.comparison import compare
from kl_bitexact.errors import ConfigError, ExitCode
from kl_bitexact.report import terminal
from kl_bitexact.results import io as results_io
from kl_bitexact.results import verdict as numbers
from kl_bitexact.results.model import (
    Cause,
    PlannedTest,
    Results,
    ServerInfo,
    Status,
    SuiteResult,
    TestResult,
    current_run_info,
)
from kl_bitexact.untrusted import escape
from kl_bitexact.untrusted.jsonfile import read_bounded, read_json

if TYPE_CHECKING:
    from kl_bitexact.ingest.junit import JUnitCase


MAX_LOG_BYTES = 256 * 1024 * 1024
# The plugin's plan (`--kl-plan`): ~150 bytes a test.
MAX_PLAN_BYTES = 64 * 1024 * 1024
_NOT_REPORTED = "not run: pytest ended before reaching this test (-x, --maxfail, or a crash)"
# How a test of JUnit XML from elsewhere runs again, at best: pytest (with the plugin, which
# recorded the node id) in the directory that run started in; its options are not known.
PYTEST_RERUN = ("python", "-m", "pytest")


def import_and_write(
    junit_path: Path,
    log_path: Path | None,
    out_path: Path,
    min_cache_hit_ratio: float,
    plan: Sequence[PlannedTest] | None = None,
    rerun: Sequence[str] = PYTEST_RERUN,
) -> int:
    """Convert, write atomically, print one line per test; exit codes as `run`'s. With the
    session's `plan`, a planned test the XML does not report is an error (a crash).
    `rerun`: the command that runs a test again once its node id is appended."""
    _, imported = import_junit(junit_path, log_path, min_cache_hit_ratio, rerun=rerun)
    if plan is not None:
        complete = not structs.replace(imported, plan=tuple(plan)).missing()
        imported = with_plan(imported, plan, _NOT_REPORTED)
        run = structs.replace(imported.run, finished=complete)
        imported = structs.replace(imported, run=run)
    write_and_list(imported, out_path)
    # The gate's verdict of these results without a base, as `report` gives it, and its
    # tally in the words of every report (`20 ok, 115 not judged on the reference engine`).
    comparison = compare(imported, None)
    code = comparison.decision.exit_code
    print(terminal.tally(comparison))
    if code is ExitCode.COULD_NOT_RUN:
        print(f"kl-bitexact: {_could_not_run(imported, junit_path)}", file=sys.stderr)
    return int(code)


def import_junit(
    junit_path: Path,
    log_path: Path | None,
    min_cache_hit_ratio: float,
    *,
    interrupted: bool = False,
    rerun: Sequence[str] | None = None,
) -> tuple[tuple[JUnitCase, ...], Results]:
    """pytest's JUnit XML (and console log) as results, with the cases they came from
    (`interrupted`: of a stopped session, ingest/junit.py says what that changes; `rerun`:
    the command that runs a test again once its node id is appended)."""
    from kl_bitexact.ingest import junit
    from kl_bitexact.ingest.junit_results import Options, node_id, to_results
    from kl_bitexact.ingest.log_split import split_log

    cases = junit.read(junit_path, interrupted=interrupted)
    log = _read_log(log_path) if log_path is not None else None
    log_output = split_log(log, [node_id(case) for case in cases]) if log else None
    options = Options(
        min_cache_hit_ratio=min_cache_hit_ratio,
        log_output=log_output,
        rerun=None if rerun is None else tuple(rerun),
    )
    return cases, to_results(cases, current_run_info(), options)


def read_plan(path: Path) -> tuple[PlannedTest, ...] | None:
    """The tests the session collected (the plugin's `--kl-plan` file); None when pytest
    stopped before it finished collecting (the file is then absent)."""
    if not path.exists():
        return None
    document = read_json(path, what="pytest plan", max_bytes=MAX_PLAN_BYTES)
    if not isinstance(document, list):
        raise ConfigError(f"{path}: a pytest plan is a list of tests")
    return tuple(_planned(entry, path) for entry in document)


def _planned(entry: Any, path: Path) -> PlannedTest:
    fields = ("suite", "id", "check")
    if not isinstance(entry, dict) or not all(isinstance(entry.get(f), str) for f in fields):
        raise ConfigError(f"{path}: each planned test has a suite, an id and a check")
    return PlannedTest(suite=entry["suite"], id=entry["id"], check=entry["check"])


def with_plan(results: Results, plan: Sequence[PlannedTest], reason: str) -> Results:
    """`results` carrying `plan`, and an `error` (the runner's, not the change's) for every
    planned test without a result, saying `reason` - as `run` records a stopped run."""
    reported = {test.id for _, test in results.all_tests()}
    missing: dict[str, list[TestResult]] = {}
    for item in plan:
        if item.id not in reported:
            lost = TestResult(item.id, item.check, Status.ERROR, message=reason, cause=Cause.RUNNER)
            missing.setdefault(item.suite, []).append(lost)
    added = [SuiteResult(name, ServerInfo("unknown"), tuple(t)) for name, t in missing.items()]
    suites = results_io.join_by_name([*results.suites, *added])
    return structs.replace(results, suites=suites, plan=tuple(plan))


def write_and_list(results: Results, out_path: Path) -> None:
    """results.json written atomically, and one line per test on stdout."""
    results_io.write_atomic(results, out_path)
    for _, test in results.all_tests():
        print(f"{test.status.value:8} {test.id}{_metrics(test)}")
        # Which fact, and what the server said; what a test not judged needs.
        if test.status is Status.NOT_EXERCISED or numbers.needs(test):
            print(f"  {escape.terminal(test.message, 1000)}")
    print(f"kl-bitexact: wrote {out_path}")


def _could_not_run(imported: Results, junit_path: Path) -> str:
    """Why exit 2: nothing reached a verdict, or some tests errored beside those that did."""
    tests = [test for _, test in imported.all_tests()]
    errored = [test.id for test in tests if test.status is Status.ERROR]
    if any(test.status in (Status.PASSED, Status.FAILED) for test in tests):
        shown = ", ".join(errored[:3]) + (" ..." if len(errored) > 3 else "")
        return f"{len(errored)} test(s) in {junit_path} errored before a verdict: {shown}"
    return f"no test in {junit_path} ran to a verdict"


def _read_log(path: Path) -> str:
    raw = read_bounded(path, what="the log", max_bytes=MAX_LOG_BYTES)
    return raw.decode("utf-8", errors="replace")


def _metrics(test: TestResult) -> str:
    parts = []
    if test.kl_div is not None:
        parts.append(f"kl={test.kl_div:.3g}")
    if test.cache_hits is not None:
        parts.append(f"hits={test.cache_hits.hit}/{test.cache_hits.total}")
    if test.exact is not None:
        parts.append(f"differ={test.exact.mismatched}/{test.exact.tokens}")
    return f"  ({', '.join(parts)})" if parts else ""
