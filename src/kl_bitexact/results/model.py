"""The results model: what a run measured, as frozen values (results.json's shape).

Each value is a frozen msgspec Struct that refuses unknown keys and carries the bounds the
published schema (schemas/results.schema.json) sets on its fields, so results.json decodes
straight into it, checked as it is parsed (issue 40: converting separate strict twins into
dataclasses was half of reading a base run of 100,000 tests). strict.py checks, at the
first load, that every bound here is the schema's and no other: a bound changed in only one
of the two fails the load naming the field.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from typing import Annotated, Final

import msgspec
from msgspec import Meta

from kl_bitexact import __version__
from kl_bitexact.results.commit import checkout_commit

SCHEMA_VERSION: Final = 1
TOOL_NAME = "kl-bitexact"

# The schema's bounds, named once where several fields share them ($defs text and count).
Text = Annotated[str, Meta(max_length=20000)]
Count = Annotated[int, Meta(ge=0)]
NonNegative = Annotated[float, Meta(ge=0)]
LineNumber = Annotated[int, Meta(ge=1)]
LineNumbers = Annotated[tuple[LineNumber, ...], Meta(max_length=100000)]
Identifier = Annotated[str, Meta(min_length=1, max_length=1000)]
Name = Annotated[str, Meta(min_length=1, max_length=500)]
CheckName = Annotated[str, Meta(max_length=200)]
Hint = Annotated[str, Meta(max_length=2000)]


class Value(msgspec.Struct, frozen=True, forbid_unknown_fields=True, gc=False):
    """A frozen part of results.json: an unknown key is refused as it is decoded. Not
    tracked by the cycle collector (values never hold themselves), so a run of 100,000
    tests builds no work for it."""


class Status(str, Enum):
    """What the runner observed. The gate verdict is derived later, never stored."""

    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"
    SKIPPED = "skipped"
    # The check could not measure anything (cache disabled, no sample kept, no token
    # compared). Never counted as a pass: see SGLANG-PROTOCOL.md on vacuous passes.
    NOT_RUN = "not_run"
    # `run --repeat N`: the test's own repeats disagreed with each other (outputs, logprobs,
    # cache hits or verdicts); `TestResult.repeats` holds the evidence. Never retried away.
    FLAKY = "flaky"
    # The server is not what the test claims to test: a fact the test states (`expect`) did
    # not hold, or the server could not tell it (issue 35). Whatever its numbers say, they
    # are not about the path the test guards; never a pass, never a regression of them.
    NOT_EXERCISED = "not_exercised"


class Cause(str, Enum):
    """Why an `error` test did not measure: whom to look at. Nothing measured is never a
    regression of the change (issue 27); the comment names the cause once."""

    UNKNOWN = ""  # not recorded (files from before causes, imports, hand-made results)
    # The runner, not the change: a server at a URL that did not answer (`--base-url`), a
    # run interrupted or aborted before the test finished, a planned test without a result.
    RUNNER = "runner"
    SERVER = "server"  # the server kl-bitexact launched did not start, or died
    CHECK = "check"  # the check failed against a running server (its answer, a timeout)


class ExactMatch(Value, frozen=True):
    """Logprob pairs compared (decode vs replay) and how many differ in any bit."""

    tokens: Count
    mismatched: Count
    # Decoded positions left out of `tokens` (and of the KL) because the server did not
    # report a logprob for them (llama.cpp: tokens that end mid-character).
    not_reported: Count = 0
    # The test ran in exact mode (`exact: true`, `run --exact`): any differing logprob
    # fails it. False in files written before it was recorded.
    enforced: bool = False


class CacheHits(Value, frozen=True):
    """Samples that hit the cache out of those sent, against the required ratio."""

    hit: Count
    total: Count
    min_ratio: Annotated[float, Meta(ge=0, le=1)]
    # Hits the server geometry allows (page size, track interval, speculative block);
    # None when the geometry is unknown.
    expected: Count | None = None


class Divergence(Value, frozen=True):
    """Where one sample's decode and replay logprobs first differ."""

    sample: Count
    token_index: Count
    cached_tokens: Count | None = None
    decode_logprob: float | None = None
    replay_logprob: float | None = None
    # Human hint relating the position to page / track boundaries.
    hint: Hint = ""


class Repeats(Value, frozen=True):
    """The same test run `count` times (`run --repeat`), compared with each other.

    A position is one decoded token of one sample kept by the check; it changed when a
    later repeat's output token, decode logprob or replay logprob differs in any bit from
    the first repeat's. Samples kept by only some repeats show in `cache_hits`.
    """

    count: Annotated[int, Meta(ge=1, le=1000)]
    launches: Annotated[int, Meta(ge=1, le=1000)] = (
        1  # server launches the repeats ran on (`--relaunch`: one each)
    )
    positions: Count = 0  # positions compared between repeats
    changed: Count = 0
    kl: Annotated[
        tuple[float | None, ...], Meta(max_length=1000)
    ] = ()  # avg KL of each repeat, in order
    # Cache checks: the noise floor (avg KL with no cache) of each repeat, in order; with
    # `kl` and `changed` it says whether the engine is run-to-run deterministic at this
    # configuration (compare/against_base.py).
    floors: Annotated[tuple[float | None, ...], Meta(max_length=1000)] = ()
    cache_hits: Annotated[
        tuple[Count | None, ...], Meta(max_length=1000)
    ] = ()  # cache hits of each repeat
    statuses: Annotated[tuple[Status, ...], Meta(max_length=1000)] = ()  # each repeat's own status
    first_change: Hint = ""  # where the repeats first disagree, in words

    @property
    def agree(self) -> bool:
        return self.changed == 0 and len(set(self.cache_hits)) <= 1 and len(set(self.statuses)) <= 1


class ConcurrentRound(Value, frozen=True):
    """One round of `concurrent_prefix_hit`: its requests sent at once, each on its own
    connection, as the server answered them (request numbers are prompt order)."""

    cached_tokens: Annotated[
        tuple[Count | None, ...], Meta(max_length=10000)
    ]  # each request's, as the server reported it
    completed: Annotated[
        tuple[Count, ...], Meta(max_length=10000)
    ]  # the requests in the order their answers came back
    # Requests that reused more than the warmed prompts allow: a prefix only another
    # request of the same round could have left (which one the server served first decides).
    concurrent_hits: Count
    reached: bool  # the round reached the shape the test asserts (`Concurrency.shape`)
    diverged: Annotated[
        tuple[Count, ...], Meta(max_length=10000)
    ] = ()  # requests with a logprob unlike its uncached replay's
    miscounted: Annotated[
        tuple[Count, ...], Meta(max_length=10000)
    ] = ()  # requests whose cached_tokens the geometry does not allow


class Concurrency(Value, frozen=True):
    """What `concurrent_prefix_hit` observed in each of its rounds: the order the server
    served concurrent requests in decides their hits, so each round is kept as seen."""

    shape: Text  # what a round must show to exercise the test, in words
    rounds: Annotated[tuple[ConcurrentRound, ...], Meta(max_length=1000)] = ()

    @property
    def reached(self) -> int:
        return sum(1 for one in self.rounds if one.reached)

    @property
    def failed(self) -> int:
        """Rounds with a logprob unlike its replay's (any bit) or a miscounted hit."""
        return sum(1 for one in self.rounds if one.diverged or one.miscounted)


class NoiseFloor(Value, frozen=True):
    """A cache check's noise floor: the engine's drift on the same prompts with no cache
    involved (a cold generation of them against the same replay), measured in the same run.

    On an engine that is not batch-invariant a decode step differs from the prefill that
    replays it, cache or not; the floor says how much, so a cache test's KL can be read
    against it (`ratio`) and, under `gate: noise-floor`, judged by it (`factor`, `margin`).
    """

    kl: float | None  # avg KL of the cold generation against the replay; None: nothing compared
    tokens: Count = 0
    mismatched: Count = 0
    max_abs_diff: NonNegative | None = None
    ratio: NonNegative | None = None  # the cache test's KL / `kl`; None when `kl` is 0 or unknown
    # `gate: noise-floor` only: the test fails when its avg KL exceeds factor x kl + margin.
    factor: NonNegative | None = None
    margin: NonNegative | None = None

    @property
    def gates(self) -> bool:
        """The test is judged by its floor (gate: noise-floor) rather than its threshold: a
        floor was measured and is finite (an uncached path that diverges excuses nothing)."""
        return self.factor is not None and self.kl is not None and math.isfinite(self.kl)

    def failure(self, kl: float | None) -> str | None:
        """The noise-floor rule, stated once (`run` and the report's check of recorded
        numbers both apply it): a test whose floor gates fails when its avg KL exceeds
        factor x floor KL + margin. Why it fails, or None."""
        if not self.gates or kl is None:
            return None
        factor, floor, margin = self.factor or 0.0, self.kl or 0.0, self.margin or 0.0
        if kl <= factor * floor + margin:
            return None
        beyond = f"avg KL {kl:.3e} > {factor:g} x noise floor {floor:.3e} + {margin:g}"
        if floor == 0:
            # Issue 41: named for what it is; the comparison judges it against the base.
            return (
                f"{beyond}: cache-only drift (the same prompts with no cache are bit-exact, "
                "so the drift is the cache path's: slot batching, or a fault); the floor "
                "rule fails it unless the base shows the same numbers bit for bit"
            )
        return f"{beyond} (the same prompts with no cache)"


class RanWhen(str, Enum):
    """When a named function ran, as far as a test is concerned."""

    NOT = ""  # it did not run
    TEST = "test"  # while the test ran
    STARTUP = "startup"  # while the server the test ran on started


class FunctionReach(Value, frozen=True):
    """One function a test names (`reach:`, `module:qualname`) and whether it ran: while
    the test ran, or while the server it ran on started (a constructor, a graph capture:
    once per launch, for every test on it)."""

    name: Identifier
    ran: bool
    when: RanWhen = RanWhen.NOT
    # Why it cannot have run, when the probe knows: the module has no such function, or
    # no process of the server imported the module.
    note: Text = ""


class Reach(Value, frozen=True):
    """What the reach probes saw of a test (docs/reach.md). `measured` False: nothing is
    known (a server kl-bitexact did not launch, one not in Python), and `why_not` says why;
    that is never a pass."""

    measured: bool
    functions: Annotated[tuple[FunctionReach, ...], Meta(max_length=10000)] = ()
    why_not: Text = ""
    # The PR's changed functions (`run --reach-diff`) that ran while this test ran, or while
    # its server started.
    changed: Annotated[tuple[FunctionReach, ...], Meta(max_length=10000)] = ()

    @property
    def unreached(self) -> tuple[FunctionReach, ...]:
        """The named functions that did not run (all of them when not measured)."""
        return tuple(f for f in self.functions if not (self.measured and f.ran))


class ChangedFunction(Value, frozen=True):
    """A function of the engine's Python code that the PR changed (`run --reach-diff`), and
    what the run's suites executed of it."""

    name: Identifier  # module:qualname
    path: Annotated[str, Meta(max_length=4000)]  # its file, relative to the engine repository
    line: LineNumber
    changed_lines: LineNumbers = ()  # its lines the diff added or edited
    tests: Annotated[
        tuple[Annotated[str, Meta(max_length=1000)], ...], Meta(max_length=100000)
    ] = ()  # the tests while which it ran
    at_startup: bool = False  # it ran while a server started (for every test on it)
    # Of its changed lines that are statements, those coverage.py saw run and those it did
    # not; None: no line data (Changes.lines_why_not says why).
    lines_run: LineNumbers | None = None
    lines_not_run: LineNumbers | None = None

    @property
    def ran(self) -> bool:
        return bool(self.tests) or self.at_startup


class Changes(Value, frozen=True):
    """The PR's change in the engine's Python code, reached or not (`run --reach-diff`)."""

    base: Annotated[str, Meta(max_length=200)]  # the commits compared (the merge base, the head)
    head: Annotated[str, Meta(max_length=200)]
    functions: Annotated[tuple[ChangedFunction, ...], Meta(max_length=100000)] = ()
    # False: no test ran on a server whose probes could see (all attached, or none in
    # Python); nothing is known of the functions, and `why_not` says why.
    measured: bool = True
    why_not: Text = ""
    lines_why_not: Text = ""  # why the functions have no line data ("" when they do)

    @property
    def unreached(self) -> tuple[ChangedFunction, ...]:
        """Changed functions no test executed (all of them when not measured)."""
        return tuple(f for f in self.functions if not (self.measured and f.ran))


class FactState(str, Enum):
    """What the server said of one fact a test states."""

    HOLDS = "holds"
    DIFFERS = "differs"  # the server reported another value
    UNKNOWN = "unknown"  # the server did not report it (or could not be asked)


class Fact(Value, frozen=True):
    """One fact a test states about its server (`expect`), against what the server itself
    reported (sglang's /server_info, llama.cpp's /props, vLLM's /server_info)."""

    name: Name  # the key as the suite names it; dots reach into nested answers
    expected: Hint  # the condition in words: `true`, `"DSPARK"`, `at most 512`, `one of [...]`
    state: FactState
    # What the server reported, as compact JSON (cut to a bound); None: it did not say.
    reported: Hint | None = None
    source: Annotated[str, Meta(max_length=500)] = ""  # where it was read, e.g. `GET /server_info`
    why_unknown: Text = ""  # UNKNOWN only: why the server could not tell

    @property
    def holds(self) -> bool:
        return self.state is FactState.HOLDS

    def failure(self) -> str:
        """The fact and what the server said, in words ("" when it holds)."""
        if self.holds:
            return ""
        where = f" ({self.source})" if self.source else ""
        if self.state is FactState.DIFFERS:
            said = f"the server reported {self.reported}{where}"
        else:
            said = f"the server did not report it{where}" + (
                f": {self.why_unknown}" if self.why_unknown else ""
            )
        return f"{self.name}: expected {self.expected}, {said}"


class TestResult(Value, frozen=True):
    """One check of one suite."""

    __test__ = False  # not a pytest test class despite the name

    id: Identifier
    check: CheckName
    status: Status
    kl_div: float | None = None
    kl_threshold: float | None = None
    kl_per_sample: tuple[float, ...] | None = None  # None: not measured (or not printed)
    exact: ExactMatch | None = None
    cache_hits: CacheHits | None = None
    first_divergence: tuple[Divergence, ...] = ()
    blocked_by: tuple[Annotated[str, Meta(max_length=500)], ...] = ()
    duration_s: NonNegative = 0.0
    message: Text = ""
    warnings: tuple[Text, ...] = ()
    # What to do about an `error` (the EngineError's hint), e.g. which server flag is missing.
    hint: Text = ""
    repeats: Repeats | None = None  # `run --repeat N` with N > 1 only
    # The largest |decode - replay| logprob difference over the compared positions.
    max_abs_diff: NonNegative | None = None
    noise_floor: NoiseFloor | None = None  # cache checks: the same prompts with no cache
    cause: Cause = Cause.UNKNOWN  # why an `error` did not measure
    reach: Reach | None = None  # None: the test names no function and no diff was probed
    # The facts the test states about its server, each as the server reported it (empty:
    # none stated). One that does not hold makes the test `not_exercised` (results.verdict).
    facts: Annotated[tuple[Fact, ...], Meta(max_length=1000)] = ()
    # concurrent_prefix_hit: each round of requests sent at once, as observed; None for the
    # other checks. A pass whose rounds never reached its shape is `not_exercised`.
    concurrency: Concurrency | None = None


class ServerInfo(Value, frozen=True):
    engine: Annotated[str, Meta(max_length=100)]
    args: tuple[Text, ...] = ()
    launch_s: float | None = None
    # The engine as the server reports itself (None: it does not say).
    version: Annotated[str, Meta(max_length=500)] | None = None
    build: Annotated[str, Meta(max_length=500)] | None = None
    backend: Annotated[str, Meta(max_length=500)] | None = None


class SuiteResult(Value, frozen=True):
    name: Name
    server: ServerInfo
    tests: tuple[TestResult, ...] = ()
    # The suite file the run read it from, as given (`<bundled example.yaml>` for the bundled
    # one); None: not a suite file's (pytest, JUnit) or not recorded. The comment's command
    # to run a failing test again names it.
    file: Annotated[str, Meta(max_length=1000)] | None = None
    # The command line that runs one of its tests again, from the directory the run
    # started in, once the test's id (a pytest node id) is appended: `kl-bitexact pytest`'s
    # own, or `python -m pytest` for a JUnit import of the plugin's tests. None: none known
    # (a suite file's tests are run again through `file`).
    rerun: (
        Annotated[tuple[Annotated[str, Meta(max_length=1000)], ...], Meta(max_length=100)] | None
    ) = None


class RunInfo(Value, frozen=True):
    commit: Annotated[str, Meta(max_length=200)] | None = None
    ref: Annotated[str, Meta(max_length=500)] | None = None
    shard: Annotated[str, Meta(max_length=200)] | None = None
    started_at: Annotated[str, Meta(max_length=100)] | None = None
    # True once every planned test has its verdict; False while running and after an
    # interrupted or aborted run; None in files written before runs recorded it.
    finished: bool | None = None


class PlannedTest(Value, frozen=True):
    """One test the run meant to execute: enough to report it if it never got a verdict."""

    suite: Name
    id: Identifier
    check: CheckName
    # Listed because it ran, not planned ahead: the part of a merged run it came from (a
    # `kl-bitexact pytest` session, a JUnit import, an older file) recorded no plan, so
    # what that part did not run is unknown (issue 36: a merge keeps every part's plan).
    unplanned: bool = False


class ToolInfo(Value, frozen=True):
    name: Annotated[str, Meta(max_length=100)] = TOOL_NAME
    version: Annotated[str, Meta(max_length=100)] = __version__


class Results(Value, frozen=True):
    """A whole results.json document."""

    run: RunInfo = msgspec.field(default_factory=RunInfo)
    suites: tuple[SuiteResult, ...] = ()
    tool: ToolInfo = msgspec.field(default_factory=ToolInfo)
    schema_version: int = SCHEMA_VERSION
    # Every test the run meant to execute (its suite definitions after --select), written
    # before the first test runs. None: not recorded (files from before plans existed),
    # so a test missing from `suites` cannot be told removed from lost.
    plan: tuple[PlannedTest, ...] | None = None
    # `run --reach-diff`: the PR's changed functions and which tests executed them.
    changes: Changes | None = None

    def all_tests(self) -> Iterable[tuple[SuiteResult, TestResult]]:
        for suite in self.suites:
            for test in suite.tests:
                yield suite, test

    @property
    def plan_complete(self) -> bool:
        """Every part of the run recorded its plan: a test missing from `suites` and from
        the plan was taken out, not lost."""
        return self.plan is not None and not any(item.unplanned for item in self.plan)

    def planned_ids(self) -> frozenset[str]:
        """The tests a run planned ahead (and must prove what its check measures)."""
        return frozenset(item.id for item in self.plan or () if not item.unplanned)

    def missing(self) -> tuple[PlannedTest, ...]:
        """Planned tests that have no result (the run stopped before reporting them)."""
        if not self.plan:  # no plan, nothing missing: not worth a set of every test's id
            return ()
        reported = {test.id for suite in self.suites for test in suite.tests}
        return tuple(item for item in self.plan or () if item.id not in reported)


def current_run_info(checkout: Path | None = None) -> RunInfo:
    """This run's start time, its ref as GitHub Actions sets it, and the commit it tests:
    the one checked out in `checkout` (default: the working directory), else GITHUB_SHA
    (commit.py says why the checkout comes first)."""
    tested = checkout_commit(Path.cwd() if checkout is None else checkout)
    return RunInfo(
        commit=tested or os.environ.get("GITHUB_SHA"),
        ref=os.environ.get("GITHUB_REF"),
        started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
