"""Measured seconds per registered file, from earlier results.json files (pure).

Mapping (documented in docs/lint-ci.md, "`kl-bitexact shard`"): a test whose id starts with
`PATH::` (a pytest node id, as `kl-bitexact pytest` writes them) belongs to the registered
file PATH (or the one registered file ending in /PATH, as node ids are relative to pytest's
directory); the other tests of a suite result belong to the kl-bitexact suite file
registering that suite name, which is also charged the server launch. Within one results
file a file's time is the sum of its tests' `duration_s` (tests that ran: passed, failed or
error); across several results files (several runs) the median of the files that measured
it.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence

from kl_bitexact.registry.model import SUITE_FILE_BACKEND, Registration
from kl_bitexact.results.model import Results, Status, SuiteResult

_RAN = (Status.PASSED, Status.FAILED, Status.ERROR)


def measured(runs: Sequence[Results], registrations: Sequence[Registration]) -> dict[str, float]:
    """file -> measured seconds, for the files some run measured."""
    observations: dict[str, list[float]] = defaultdict(list)
    for run in runs:
        for file, seconds in _one_run(run, registrations).items():
            observations[file].append(seconds)
    return {file: statistics.median(values) for file, values in observations.items()}


def _one_run(run: Results, registrations: Sequence[Registration]) -> dict[str, float]:
    files = {r.file for r in registrations}
    suite_files = _suite_files(registrations)
    totals: dict[str, float] = defaultdict(float)
    for suite in run.suites:
        owner = suite_files.get(suite.name)
        for test in suite.tests:
            file = _file_of(test.id, files) or owner
            if file is not None and test.status in _RAN:
                totals[file] += test.duration_s
        if owner is not None and owner in totals:
            totals[owner] += _launch(suite)
    return dict(totals)


def _suite_files(registrations: Sequence[Registration]) -> Mapping[str, str]:
    """suite name -> its kl-bitexact suite file, when exactly one file registers it."""
    owners: dict[str, set[str]] = defaultdict(set)
    for r in registrations:
        if r.backend == SUITE_FILE_BACKEND:
            owners[r.suite].add(r.file)
    return {suite: next(iter(files)) for suite, files in owners.items() if len(files) == 1}


def _file_of(test_id: str, files: set[str]) -> str | None:
    """The registered file a pytest node id names; node ids are relative to where pytest
    ran (sglang runs from test/), so a unique suffix match counts."""
    prefix = test_id.split("::", 1)[0].removeprefix("./")
    if prefix in files:
        return prefix
    matches = [file for file in files if file.endswith("/" + prefix)]
    return matches[0] if len(matches) == 1 else None


def _launch(suite: SuiteResult) -> float:
    return suite.server.launch_s or 0.0
