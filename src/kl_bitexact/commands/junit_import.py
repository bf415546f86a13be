"""The JUnit import `import-junit` and `pytest` share: pytest's JUnit XML (and console log)
as results, written atomically and listed one line per test. defusedxml loads only here,
when a command imports."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from kl_bitexact.compare.comparison import compare
from kl_bitexact.errors import ExitCode
from kl_bitexact.results import io as results_io
from kl_bitexact.results.model import Results, Status, TestResult, current_run_info
from kl_bitexact.untrusted.jsonfile import read_bounded

if TYPE_CHECKING:
    from kl_bitexact.ingest.junit import JUnitCase


MAX_LOG_BYTES = 256 * 1024 * 1024


def import_and_write(
    junit_path: Path, log_path: Path | None, out_path: Path, min_cache_hit_ratio: float
) -> int:
    """Convert, write atomically, print one line per test; exit codes as `run`'s."""
    _, imported = import_junit(junit_path, log_path, min_cache_hit_ratio)
    write_and_list(imported, out_path)
    # The gate's verdict of these results without a base, as `report` gives it.
    code = compare(imported, None).decision.exit_code
    if code is ExitCode.COULD_NOT_RUN:
        print(f"kl-bitexact: {_could_not_run(imported, junit_path)}", file=sys.stderr)
    return int(code)


def import_junit(
    junit_path: Path, log_path: Path | None, min_cache_hit_ratio: float
) -> tuple[tuple[JUnitCase, ...], Results]:
    """pytest's JUnit XML (and console log) as results, with the cases they came from."""
    from kl_bitexact.ingest import junit
    from kl_bitexact.ingest.junit_results import Options, node_id, to_results
    from kl_bitexact.ingest.log_split import split_log

    cases = junit.read(junit_path)
    log = _read_log(log_path) if log_path is not None else None
    log_output = split_log(log, [node_id(case) for case in cases]) if log else None
    options = Options(min_cache_hit_ratio=min_cache_hit_ratio, log_output=log_output)
    return cases, to_results(cases, current_run_info(), options)


def write_and_list(results: Results, out_path: Path) -> None:
    """results.json written atomically, and one line per test on stdout."""
    results_io.write_atomic(results, out_path)
    for _, test in results.all_tests():
        print(f"{test.status.value:8} {test.id}{_metrics(test)}")
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
