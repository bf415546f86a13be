"""results.json in and out: atomic writes, bounded and validated reads, shard merging.

results.json is the hand-off between the GPU job and the publish job. It arrives as a CI
artifact written by a run that executed PR code, so `load` treats it as untrusted: the
size is bounded and the document is validated against the JSON Schema before any field
is used.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from enum import Enum
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

from kl_bitexact import __version__
from kl_bitexact.errors import ConfigError
from kl_bitexact.jsonfile import read_json
from kl_bitexact.results.model import (
    SCHEMA_VERSION,
    CacheHits,
    Divergence,
    ExactMatch,
    Results,
    RunInfo,
    ServerInfo,
    Status,
    SuiteResult,
    TestResult,
    ToolInfo,
)

# A 32-sample suite with first divergences is a few kB; 10,000 such tests stay far under
# this. Anything larger is not a results file we wrote.
MAX_RESULTS_BYTES = 64 * 1024 * 1024


# --- JSON out ---------------------------------------------------------------------------


def to_json(results: Results) -> dict[str, Any]:
    """The JSON document for `results` (plain dicts and lists, key order stable)."""
    document: dict[str, Any] = _plain(dataclasses.asdict(results))
    return document


def _plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def dumps(results: Results) -> str:
    return json.dumps(to_json(results), indent=2, allow_nan=False) + "\n"


def write_atomic(results: Results, path: Path) -> None:
    """Write results so that a reader (or a kill -9) never sees a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(dumps(results))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


# --- JSON in ----------------------------------------------------------------------------


@cache
def schema() -> dict[str, Any]:
    """The published JSON Schema of results.json (schemas/results.schema.json)."""
    text = resources.files("kl_bitexact").joinpath("schemas/results.schema.json").read_text()
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def load(path: Path, *, max_bytes: int = MAX_RESULTS_BYTES) -> Results:
    """Read, bound, validate and decode one results file; errors name the file."""
    hint = "pass the results.json written by `kl-bitexact run`"
    document = read_json(path, what="results file", max_bytes=max_bytes, hint=hint)
    return from_json(document, source=str(path))


def load_merged(paths: Sequence[Path]) -> Results:
    """Several results files (the shards of one run) loaded and merged into one."""
    return merge([(str(path), load(path)) for path in paths])


def from_json(document: Any, *, source: str = "<results>") -> Results:
    """Validate a parsed document and decode it into Results."""
    _check_version(document, source)
    validator = jsonschema.Draft202012Validator(schema())
    problem = jsonschema.exceptions.best_match(validator.iter_errors(document))
    if problem is not None:
        where = "/".join(str(part) for part in problem.absolute_path) or "(top level)"
        raise ConfigError(f"{source}: invalid results at {where}: {problem.message}")
    return _decode_results(document)


def _check_version(document: Any, source: str) -> None:
    version = document.get("schema_version") if isinstance(document, dict) else None
    if version != SCHEMA_VERSION:
        raise ConfigError(
            f"{source}: schema_version {version!r} is not supported "
            f"(this kl-bitexact {__version__} reads schema_version {SCHEMA_VERSION})",
            hint="produce and read results with the same major version of kl-bitexact",
        )


def _decode_results(doc: Mapping[str, Any]) -> Results:
    return Results(
        schema_version=doc["schema_version"],
        tool=ToolInfo(**doc["tool"]),
        run=RunInfo(**doc["run"]),
        suites=tuple(_decode_suite(suite) for suite in doc["suites"]),
    )


def _decode_suite(doc: Mapping[str, Any]) -> SuiteResult:
    server = doc["server"]
    return SuiteResult(
        name=doc["name"],
        server=ServerInfo(
            engine=server["engine"],
            args=tuple(server.get("args", ())),
            launch_s=server.get("launch_s"),
        ),
        tests=tuple(_decode_test(test) for test in doc["tests"]),
    )


def _decode_test(doc: Mapping[str, Any]) -> TestResult:
    exact, hits = doc.get("exact"), doc.get("cache_hits")
    return TestResult(
        id=doc["id"],
        check=doc["check"],
        status=Status(doc["status"]),
        kl_div=doc.get("kl_div"),
        kl_threshold=doc.get("kl_threshold"),
        kl_per_sample=tuple(doc.get("kl_per_sample", ())),
        exact=ExactMatch(**exact) if exact is not None else None,
        cache_hits=CacheHits(**hits) if hits is not None else None,
        first_divergence=tuple(Divergence(**item) for item in doc.get("first_divergence", ())),
        blocked_by=tuple(doc.get("blocked_by", ())),
        duration_s=doc.get("duration_s", 0.0),
        message=doc.get("message", ""),
        warnings=tuple(doc.get("warnings", ())),
    )


# --- shards -----------------------------------------------------------------------------


def merge(sources: Sequence[tuple[str, Results]]) -> Results:
    """Combine the results of several shards into one document.

    Suites of the same name are joined; a test id seen twice is an error naming both
    sources, because silently keeping one would hide a shard that ran the wrong files.
    """
    if not sources:
        raise ConfigError("no results to merge", hint="pass at least one results.json")
    seen: dict[str, str] = {}
    for source, results in sources:
        for _, test in results.all_tests():
            if test.id in seen:
                raise ConfigError(
                    f"test {test.id!r} appears in both {seen[test.id]} and {source}",
                    hint="each shard must run a disjoint set of tests",
                )
            seen[test.id] = source
    first = sources[0][1]
    run = dataclasses.replace(first.run, shard=None, started_at=_earliest(sources))
    return Results(run=run, suites=join_by_name(s for _, r in sources for s in r.suites))


def join_by_name(suites: Iterable[SuiteResult]) -> tuple[SuiteResult, ...]:
    """One SuiteResult per suite name, in order of first appearance, holding the tests
    of every part of that name in order (the first part's server info is kept)."""
    joined: dict[str, SuiteResult] = {}
    for suite in suites:
        existing = joined.get(suite.name)
        joined[suite.name] = (
            suite
            if existing is None
            else dataclasses.replace(existing, tests=existing.tests + suite.tests)
        )
    return tuple(joined.values())


def _earliest(sources: Sequence[tuple[str, Results]]) -> str | None:
    stamps = [results.run.started_at for _, results in sources if results.run.started_at]
    return min(stamps) if stamps else None
