"""The proof jobs that should have reported, and stand-ins for the ones that did not.

The reusable workflow runs one proof job per entry of prove-plan's matrix; each uploads
`proof-<suite>/results.json`. A job that failed, was cancelled or never started uploads
nothing, and without a stand-in its tests would simply be absent from the comment: a
reviewer would read that nothing needed proving. Each of its tests becomes an `error` on
the base side instead, which the comment shows as "could not prove" (never gating).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kl_bitexact.action.shards import check_name
from kl_bitexact.results.model import Results, ServerInfo, Status, SuiteResult, TestResult
from kl_bitexact.untrusted import jsonfile

# Ids are rendered (escaped) in the comment; bounded like any untrusted string.
MAX_TEST_ID = 1000
MAX_TESTS = 10_000
_FORMAT = 'a prove-plan matrix {"include": [{"name", "suite", "tests": [...]}, ...]}'


@dataclass(frozen=True)
class ProofJob:
    name: str  # the artifact: proof-<suite>
    suite: str
    tests: tuple[str, ...]


def parse_matrix(value: str) -> tuple[ProofJob, ...]:
    """prove-plan's matrix (the plan job's `proof-matrix` output); ValueError says what is
    wrong. Empty: no proof job was planned."""
    if not value:
        return ()
    try:
        document: Any = jsonfile.loads(value)
    except json.JSONDecodeError as error:
        raise ValueError(f"not JSON ({error.msg})") from None
    include = document.get("include") if isinstance(document, dict) else None
    if not isinstance(include, list):
        raise ValueError(f"expected {_FORMAT}")
    jobs = tuple(_job(entry) for entry in include)
    if sum(len(job.tests) for job in jobs) > MAX_TESTS:
        raise ValueError(f"more than {MAX_TESTS} tests to prove")
    return jobs


def _job(entry: Any) -> ProofJob:
    if not isinstance(entry, dict):
        raise ValueError(f"expected {_FORMAT}; an entry is not an object")
    name, suite, tests = entry.get("name"), entry.get("suite"), entry.get("tests")
    if not isinstance(name, str) or not isinstance(suite, str) or not isinstance(tests, list):
        raise ValueError(f"expected {_FORMAT}; an entry lacks name, suite or tests")
    for text in (suite, *tests):
        if not isinstance(text, str) or not 0 < len(text) <= MAX_TEST_ID:
            raise ValueError(f"proof job {name[:60]!r}: a suite or test id is not a short string")
    return ProofJob(check_name(name, "proof job"), suite, tuple(tests))


def missing(proof_files: Iterable[Path], jobs: Iterable[ProofJob]) -> list[ProofJob]:
    """The planned jobs with no `<name>/results.json` among `proof_files` (the layout
    the publish job downloads them in)."""
    present = {path.parent.name for path in proof_files if path.name == "results.json"}
    return [job for job in jobs if job.name not in present]


def stand_in(job: ProofJob) -> Results:
    """An `error` base result for each test of a proof job that reported nothing."""
    message = (
        f"proof job {job.name} uploaded no results: it failed, was cancelled, or did not "
        "start (a fork PR's jobs run only after a maintainer applies the trusted label)"
    )
    tests = tuple(
        TestResult(id=test, check="proof", status=Status.ERROR, message=message)
        for test in job.tests
    )
    return Results(suites=(SuiteResult(job.suite, ServerInfo(engine="none"), tests),))
