"""The shards' results under a directory of downloaded artifacts, and the ones missing.

The run jobs upload `results-<shard>/results.json`. A shard whose job failed, was
cancelled or never started (an untrusted fork PR) uploads nothing; its absence must show
in the comment and fail the gate, so it becomes an `error` test that says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from kl_bitexact.results.model import Results, RunInfo, ServerInfo, Status, SuiteResult, TestResult

ARTIFACT_PREFIX = "results-"


def results_files(directory: Path) -> list[Path]:
    return sorted(directory.rglob("results.json"))


def missing_shards(directory: Path, expected: Sequence[str]) -> list[str]:
    return [
        name
        for name in expected
        if not (directory / f"{ARTIFACT_PREFIX}{name}" / "results.json").is_file()
    ]


def missing_shard_results(name: str) -> Results:
    """A results document with one `error` test standing for a shard that reported nothing."""
    test = TestResult(
        id=f"shard-{name}",
        check="shard",
        status=Status.ERROR,
        message=(
            f"shard {name} uploaded no results: its run job failed, was cancelled, or did not "
            "start (a fork PR runs only after a maintainer applies the trusted label)"
        ),
    )
    server = ServerInfo(engine="none")
    suite = SuiteResult(name=f"missing shard {name}", server=server, tests=(test,))
    return Results(run=RunInfo(shard=name), suites=(suite,))
