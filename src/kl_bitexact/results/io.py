"""results.json in and out: atomic writes, bounded and validated reads, shard merging.

results.json is the hand-off between the GPU job and the publish job. It arrives as a CI
artifact written by a run that executed PR code, so `load` treats it as untrusted: the
size is bounded and the document is validated against the JSON Schema before any field
is used.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import msgspec
from msgspec import structs

from kl_bitexact import __version__
from kl_bitexact.errors import ConfigError
from kl_bitexact.results import strict
from kl_bitexact.results.model import (
    SCHEMA_VERSION,
    ChangedFunction,
    Changes,
    PlannedTest,
    Results,
    SuiteResult,
)
from kl_bitexact.untrusted.jsonfile import (
    check_depth,
    parse_refused,
    read_bounded,
    replace_text,
    too_deep,
)

# A 32-sample suite with first divergences is a few kB; 10,000 such tests stay far under
# this. Anything larger is not a results file we wrote.
MAX_RESULTS_BYTES = 64 * 1024 * 1024


# --- JSON out ---------------------------------------------------------------------------


def to_json(results: Results) -> dict[str, Any]:
    """The JSON document for `results` (plain dicts and lists, key order stable).

    msgspec builds it in C; NaN and infinities stay floats, so `dumps` still refuses them.
    """
    document: dict[str, Any] = _lists(msgspec.to_builtins(results))
    return document


def _lists(value: Any) -> Any:
    """to_builtins keeps tuples; JSON arrays are lists (what jsonschema and readers expect)."""
    if isinstance(value, dict):
        return {key: _lists(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_lists(item) for item in value]
    return value


def dumps(results: Results) -> str:
    """The document as compact JSON, one line (issue 40): indented, a 100,000-test run of 8
    samples each was 99 MB, over the 64 MiB every reader takes (`MAX_RESULTS_BYTES`), and
    took 14 s to write through json's pure-Python indenting encoder; compact it is 49 MB in
    2.5 s, by json's C encoder (which writes tuples as arrays: `to_json`'s lists are for
    readers of the dict). Readers see the same JSON (`jq .` shows it indented). NaN and
    infinities are still refused (`allow_nan=False`; msgspec's encoder would write null)."""
    document = msgspec.to_builtins(results)
    return json.dumps(document, allow_nan=False, separators=(",", ":")) + "\n"


def write_atomic(results: Results, path: Path) -> None:
    """Write results so that a reader (or a kill -9) never sees a half-written file, and
    never through whatever was at `path` before (`replace_text`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_text(path, dumps(results))


# --- JSON in ---------------------------------------------------------------------------


def schema() -> dict[str, Any]:
    """The published JSON Schema of results.json (schemas/results.schema.json)."""
    return strict.schema()


def load(path: Path, *, max_bytes: int = MAX_RESULTS_BYTES) -> Results:
    """Read, bound, validate and decode one results file; errors name the file."""
    hint = "pass the results.json written by `kl-bitexact run`"
    # Never through a symlink: an artifact's results file is a file (issue 14, case 9).
    raw = read_bounded(
        path, what="results file", max_bytes=max_bytes, hint=hint, follow_symlinks=False
    )
    return loads(raw, path)


def loads(raw: bytes, path: Path) -> Results:
    """Validate and decode the bytes of a results file (`path` names it in errors)."""
    try:
        return strict.decode(raw)
    except msgspec.ValidationError as error:
        raise _invalid(error, _version_in(raw, path), str(path)) from None
    except msgspec.DecodeError as error:  # after ValidationError, its subclass
        document = parse_refused(raw, error, path, "results file")
    except RecursionError:
        raise too_deep(path, "results file") from None
    check_depth(document, path, "results file")
    return from_json(document, source=str(path))


def load_merged(paths: Sequence[Path]) -> Results:
    """Several results files (the shards of one run) loaded and merged into one."""
    return merge([(str(path), load(path)) for path in paths])


def from_json(document: Any, *, source: str = "<results>") -> Results:
    """Validate a parsed document and decode it into Results."""
    try:
        return strict.convert(document)
    except msgspec.ValidationError as error:
        version = document.get("schema_version") if isinstance(document, dict) else None
        raise _invalid(error, version, source) from None


class _VersionOnly(msgspec.Struct):
    schema_version: Any = None


def _version_in(raw: bytes, path: Path) -> Any:
    """The document's schema_version, read again only to word an error. Skipping the other
    members recurses too: a member nested past the recursion limit is the error to report
    (it was exit 3, issue 30)."""
    try:
        return msgspec.json.decode(raw, type=_VersionOnly).schema_version
    except RecursionError:
        raise too_deep(path, "results file") from None
    except msgspec.MsgspecError:
        return None


def _invalid(error: msgspec.ValidationError, version: Any, source: str) -> ConfigError:
    """The error for a document the decoder refused: another schema_version says so
    first; otherwise the JSON path (`suites/0/tests/3/kl_div`) and what is wrong there."""
    if version != SCHEMA_VERSION:
        return ConfigError(
            f"{source}: schema_version {version!r} is not supported "
            f"(this kl-bitexact {__version__} reads schema_version {SCHEMA_VERSION})",
            hint="produce and read results with the same major version of kl-bitexact",
        )
    message, _, at = str(error).partition(" - at `")
    where = _slash_path(at.rstrip("`")) or "(top level)"
    return ConfigError(f"{source}: invalid results at {where}: {message}")


def _slash_path(msgspec_path: str) -> str:
    """`$.suites[0].tests[3].kl_div` -> `suites/0/tests/3/kl_div`; `key` in `$.x` -> x."""
    path = msgspec_path.rpartition("in `")[2] if msgspec_path.startswith("key") else msgspec_path
    parts = path.removeprefix("$").replace("[", ".").replace("]", "").split(".")
    return "/".join(part for part in parts if part)


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
    run = structs.replace(
        first.run,
        commit=tested_commit(sources),
        shard=None,
        started_at=_earliest(sources),
        finished=_finished(sources),
    )
    suites = join_by_name(s for _, r in sources for s in r.suites)
    changes = _joined_changes([r.changes for _, r in sources if r.changes is not None])
    return Results(run=run, suites=suites, plan=_joined_plan(sources), changes=changes)


def _joined_changes(parts: Sequence[Changes]) -> Changes | None:
    """The PR's change as every shard saw it (`run --reach-diff` in each): a function ran
    if it ran in any shard, by the tests of all; a changed line ran if it ran in any."""
    if not parts:
        return None
    functions: dict[str, ChangedFunction] = {}
    for part in parts:
        for function in part.functions:
            known = functions.get(function.name)
            functions[function.name] = function if known is None else _joined(known, function)
    measured = [part for part in parts if part.measured]
    with_lines = [part for part in parts if not part.lines_why_not]
    return structs.replace(
        parts[0],
        functions=tuple(functions.values()),
        measured=bool(measured),
        why_not="" if measured else parts[0].why_not,
        lines_why_not="" if with_lines else parts[0].lines_why_not,
    )


def _joined(one: ChangedFunction, other: ChangedFunction) -> ChangedFunction:
    run = _lines(one.lines_run, other.lines_run)
    not_run = _lines(one.lines_not_run, other.lines_not_run)
    return structs.replace(
        one,
        tests=(*one.tests, *other.tests),
        at_startup=one.at_startup or other.at_startup,
        lines_run=run,
        lines_not_run=None
        if not_run is None
        else tuple(n for n in not_run if n not in (run or ())),
    )


def _lines(one: tuple[int, ...] | None, other: tuple[int, ...] | None) -> tuple[int, ...] | None:
    if one is None or other is None:
        return one if other is None else other
    return tuple(sorted({*one, *other}))


def tested_commit(sources: Sequence[tuple[str, Results]]) -> str | None:
    """The one commit the sources tested (those that record none, like a missing shard's
    stand-in, aside); shards of different commits are no one verdict (issue 30)."""
    commits: dict[str, str] = {}
    for source, results in sources:
        if results.run.commit is not None:
            commits.setdefault(results.run.commit, source)
    if len(commits) > 1:
        (one, first), (other, second) = list(commits.items())[:2]
        raise ConfigError(
            f"{first} tested commit {one} but {second} tested {other}: results of different "
            "commits are not one run",
            hint="merge the results of one commit's run jobs only",
        )
    return next(iter(commits), None)


def _finished(sources: Sequence[tuple[str, Results]]) -> bool | None:
    """False if any shard stopped early; None (unknown) if any shard did not say."""
    flags = [results.run.finished for _, results in sources]
    if False in flags:
        return False
    return None if None in flags else True


def _joined_plan(sources: Sequence[tuple[str, Results]]) -> tuple[PlannedTest, ...] | None:
    """Every part's plan, joined (None only when no part recorded one). A part without a
    plan (a `kl-bitexact pytest` session, a JUnit import, an older file) keeps the list of
    what it ran, marked `unplanned`: dropping the other parts' plans for it lost the tests a
    killed run never reached (issue 36)."""
    if all(results.plan is None for _, results in sources):
        return None
    return tuple(item for _, results in sources for item in _plan_of(results))


def _plan_of(results: Results) -> tuple[PlannedTest, ...]:
    if results.plan is not None:
        return results.plan
    return tuple(
        PlannedTest(suite.name, test.id, test.check, unplanned=True)
        for suite, test in results.all_tests()
    )


def join_by_name(suites: Iterable[SuiteResult]) -> tuple[SuiteResult, ...]:
    """One SuiteResult per suite name, in order of first appearance, holding the tests
    of every part of that name in order (the first part's server info is kept)."""
    joined: dict[str, SuiteResult] = {}
    for suite in suites:
        existing = joined.get(suite.name)
        joined[suite.name] = (
            suite
            if existing is None
            else structs.replace(existing, tests=existing.tests + suite.tests)
        )
    return tuple(joined.values())


def _earliest(sources: Sequence[tuple[str, Results]]) -> str | None:
    stamps = [results.run.started_at for _, results in sources if results.run.started_at]
    return min(stamps) if stamps else None
