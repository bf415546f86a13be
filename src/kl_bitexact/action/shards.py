"""The shards' results under a directory of downloaded artifacts, and the ones missing.

The run jobs upload `results-<shard>/results.json`. A shard whose job failed, was
cancelled or never started (an untrusted fork PR) uploads nothing; its absence must show
in the comment and fail the gate, so it becomes an `error` test that says so.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from kl_bitexact.results.model import (
    Cause,
    Results,
    RunInfo,
    ServerInfo,
    Status,
    SuiteResult,
    TestResult,
)
from kl_bitexact.untrusted import jsonfile

ARTIFACT_PREFIX = "results-"
_SHARD_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}")


def parse_names(value: str) -> tuple[str, ...]:
    """The expected shards: a JSON list of names, or the shard matrix itself
    ({"include": [{"name": ...}, ...]}, what `shard` planned). ValueError says what is wrong."""
    if not value:
        return ()
    try:
        document: Any = jsonfile.loads(value)
    except json.JSONDecodeError as error:
        raise ValueError(f"not JSON ({error.msg})") from None
    if isinstance(document, dict) and isinstance(document.get("include"), list):
        document = [
            entry.get("name") if isinstance(entry, dict) else None for entry in document["include"]
        ]
    if not isinstance(document, list) or not all(isinstance(n, (str, int)) for n in document):
        raise ValueError(
            'expected a JSON list of shard names or a matrix {"include": [{"name": ...}, ...]}'
        )
    return tuple(check_name(str(name)) for name in document)


def check_name(name: str, what: str = "shard") -> str:
    """`name` if it can name an artifact directory, else ValueError. Names become directory
    names (results-<name>/, proof-<suite>/); in a two-stage setup they come from an
    untrusted run's artifact, so nothing that could leave the directory."""
    if not _SHARD_NAME.fullmatch(name):
        raise ValueError(
            f"{name[:60]!r} is not a {what} name "
            "(letters, digits, '.', '_' and '-', not starting with '.')"
        )
    return name


def results_files(directory: Path) -> list[Path]:
    return sorted(directory.rglob("results.json"))


def missing_shards(results: Iterable[Path], expected: Sequence[str]) -> list[str]:
    """The expected shards with no results file among `results`: a shard's file is
    `.../results-<name>/results.json`, the layout of the run jobs' artifacts."""
    present = {
        path.parent.name.removeprefix(ARTIFACT_PREFIX)
        for path in results
        if path.name == "results.json" and path.parent.name.startswith(ARTIFACT_PREFIX)
    }
    return [name for name in expected if name not in present]


def missing_shard_results(name: str) -> Results:
    """A results document with one `error` test standing for a shard that reported nothing."""
    test = TestResult(
        id=f"shard-{name}",
        check="shard",
        status=Status.ERROR,
        cause=Cause.RUNNER,  # a job that did not run or upload: nothing blames the change
        message=(
            f"shard {name} uploaded no results: its run job failed, was cancelled, or did not "
            "start (a fork PR runs only after a maintainer applies the trusted label)"
        ),
    )
    server = ServerInfo(engine="none")
    suite = SuiteResult(name=f"missing shard {name}", server=server, tests=(test,))
    return Results(run=RunInfo(shard=name), suites=(suite,))
