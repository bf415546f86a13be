"""Each test's numbers across the base branch's recent runs, and what they say (pure).

One baseline cannot tell a new regression from an old flake: a cache-hit ratio that is
16/32 on some runs of main and 32/32 on others (sglang PR 34405) either happened to pass
on the baseline run, which blames the PR, or happened to fail, which hides it. The history
is the last N runs of the base branch (oldest first), each a `Results`; per test it keeps
the numbers a bit-exact test should repeat exactly (status, avg KL, differing logprobs,
cache hits) and derives how many runs it failed or was flaky in, whether its numbers ever
changed, and the first commit where they did.

A head test then stands in one of three ways against it (`Standing`): `new` (present in
the history, never failed there), `known` (failed or was flaky in at least one run), or
`unseen` (in no run of the window: a test the PR adds, or no history at all). Only
`known` can be let through by the gate (`--fail-on ...,allow-known`); errors and not-run
results on main say nothing about the test's own numbers, so they never make it known.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, NamedTuple, Protocol, TypeVar

from kl_bitexact.compare.gate import UNEXCUSED_RED, Policy, RedNumbers, Verdict
from kl_bitexact.results.model import Status, TestResult

R = TypeVar("R")
# The runs of the base branch the history covers by default, and at most: each is one
# artifact to download once, and a trend of more than 100 runs is no longer compact.
DEFAULT_RUNS = 20
MAX_RUNS = 100
# How long fetching a history may take (it downloads one artifact per run not cached):
# past it, the history is the runs fetched so far, and says so.
FETCH_SECONDS = 300.0
# What "failed" means on the base branch: the test's own numbers were wrong, or its repeats
# disagreed. `error` and `not_run` measured nothing about the test itself.
FAILED_ON_BASE = frozenset({Status.FAILED, Status.FLAKY})


class _Exact(Protocol):
    @property
    def tokens(self) -> int: ...
    @property
    def mismatched(self) -> int: ...


class _Hits(Protocol):
    @property
    def hit(self) -> int: ...
    @property
    def total(self) -> int: ...


class _Floor(Protocol):
    @property
    def kl(self) -> float | None: ...


class Measured(Protocol):
    """What the history reads of one test: a `TestResult`, or the lighter view
    `history_dir` decodes (the same names)."""

    @property
    def id(self) -> str: ...
    @property
    def status(self) -> Status: ...
    @property
    def kl_div(self) -> float | None: ...
    @property
    def exact(self) -> _Exact | None: ...
    @property
    def cache_hits(self) -> _Hits | None: ...
    @property
    def noise_floor(self) -> _Floor | None: ...


class RunResults(Protocol):
    """One run's tests, by suite: `Results`, or `history_dir`'s lighter view."""

    def all_tests(self) -> Iterable[tuple[Any, Measured]]: ...


class Point(NamedTuple):
    """One test in one base-branch run: the numbers that should repeat bit for bit.

    A named tuple, not a dataclass: a history of 20 runs of 1,000 tests is 20,000 of them,
    and a tuple is built in a fraction of the time."""

    status: Status
    kl: float | None = None
    mismatched: int | None = None  # differing logprobs (exact counts)
    tokens: int | None = None
    hits: int | None = None  # cache hits
    hits_total: int | None = None
    # Cache checks: the noise floor (the same prompts with no cache); with `kl` it gives
    # the ratio `compare/against_base.py` judges a change of the arithmetic by.
    floor: float | None = None

    @classmethod
    def of(cls, test: Measured) -> Point:
        exact, hits, floor = test.exact, test.cache_hits, test.noise_floor
        return cls(
            test.status,
            test.kl_div,
            exact.mismatched if exact else None,
            exact.tokens if exact else None,
            hits.hit if hits else None,
            hits.total if hits else None,
            floor.kl if floor else None,
        )

    @property
    def failed(self) -> bool:
        return self.status in FAILED_ON_BASE

    @property
    def numbers(
        self,
    ) -> tuple[float | None, int | None, int | None, int | None, int | None, float | None]:
        """What must be identical from one run to the next (the status follows from it)."""
        return self[1:]


@dataclass(frozen=True)
class Run:
    """One base-branch run of the history: where it came from, for the reader."""

    commit: str | None = None
    created_at: str | None = None
    run_id: int | None = None
    source: str = ""  # the file it was read from, or the artifact


@dataclass(frozen=True)
class TestHistory:
    """One test across the history's runs (oldest first): `points[i]` is its numbers in
    `History.runs[i]`, None when that run did not report it."""

    __test__ = False  # not a pytest test class despite the name

    suite: str
    id: str
    points: tuple[Point | None, ...]

    @property
    def present(self) -> int:
        return sum(1 for point in self.points if point is not None)

    @property
    def failed(self) -> int:
        """Runs in which it failed or was flaky."""
        return sum(1 for point in self.points if point is not None and point.failed)

    @property
    def flaky(self) -> int:
        return sum(1 for point in self.points if point is not None and point.status is Status.FLAKY)

    @property
    def first_failure(self) -> int | None:
        """Index of the oldest run in which it failed or was flaky."""
        return next((i for i, p in enumerate(self.points) if p is not None and p.failed), None)

    def worst_failure(self) -> RedNumbers | None:
        """The worst each number got in the runs where it failed (None: it never failed):
        what `allow-known` excuses, and no more (`gate.worse_than`)."""
        failed = [point for point in self.points if point is not None and point.failed]
        if not failed:
            return None
        differing = [
            p.mismatched / p.tokens for p in failed if p.mismatched is not None and p.tokens
        ]
        missed = [
            (p.hits_total - p.hits) / p.hits_total
            for p in failed
            if p.hits is not None and p.hits_total
        ]
        kls = [p.kl for p in failed if p.kl is not None]
        return RedNumbers(
            max(kls) if kls else None,
            max(differing) if differing else None,
            max(missed) if missed else None,
        )

    @property
    def changes(self) -> tuple[int, ...]:
        """Indices of the runs whose numbers differ from the run before that reported it."""
        found: list[int] = []
        previous: Point | None = None
        for index, point in enumerate(self.points):
            if point is None:
                continue
            if previous is not None and point.numbers != previous.numbers:
                found.append(index)
            previous = point
        return tuple(found)

    @property
    def changed(self) -> bool:
        return bool(self.changes)

    @property
    def steady(self) -> bool:
        """Never failed, numbers never changed: nothing to say about it."""
        return not self.failed and not self.changed


class Standing(str, Enum):
    """A head test against the base branch's history."""

    NEW = "new"  # in the history, and never failed there
    KNOWN = "known"  # failed or was flaky in at least one run of the history
    UNSEEN = "unseen"  # in no run of the history (a new test, or no history)


@dataclass(frozen=True)
class History:
    """The base branch's last runs, oldest first, and every test's numbers across them."""

    branch: str
    runs: tuple[Run, ...] = ()
    tests: Mapping[str, TestHistory] = field(default_factory=dict)
    # Why there is no history, or what limited it (runs passed over, a bound reached):
    # shown with it, never silently.
    notes: tuple[str, ...] = ()

    def of(self, test_id: str) -> TestHistory | None:
        return self.tests.get(test_id)

    def standing(self, test_id: str) -> Standing:
        found = self.tests.get(test_id)
        if found is None or not found.present:
            return Standing.UNSEEN
        return Standing.KNOWN if found.failed else Standing.NEW

    def commit_at(self, index: int | None) -> str | None:
        return None if index is None else self.runs[index].commit

    @property
    def attention(self) -> list[TestHistory]:
        """Tests that failed or whose numbers changed in the history (the rest are steady)."""
        return [test for test in self.tests.values() if not test.steady]


def build(
    branch: str, runs: Sequence[tuple[Run, RunResults]], notes: Iterable[str] = ()
) -> History:
    """The history of `runs` (any order; sorted oldest first by their time, then id)."""
    ordered = sorted(runs, key=lambda item: (item[0].created_at or "", item[0].run_id or 0))
    columns = tuple(
        {test.id: (suite.name, test) for suite, test in results.all_tests()}
        for _, results in ordered
    )
    return History(branch, tuple(run for run, _ in ordered), _Tests(columns), tuple(notes))


class _Tests(Mapping[str, TestHistory]):
    """Each test's history, built when it is first asked for: `report` asks only for the
    tests that need attention, not for every test of every run."""

    def __init__(self, columns: tuple[dict[str, tuple[str, Measured]], ...]) -> None:
        self._columns = columns
        self._ids = list(dict.fromkeys(test_id for column in columns for test_id in column))
        self._built: dict[str, TestHistory] = {}

    def __getitem__(self, test_id: str) -> TestHistory:
        found = self._built.get(test_id)
        if found is None:
            entries = [column.get(test_id) for column in self._columns]
            suites = [entry[0] for entry in entries if entry is not None]
            if not suites:
                raise KeyError(test_id)
            suite = suites[0]
            points = tuple(None if e is None else Point.of(e[1]) for e in entries)
            found = self._built[test_id] = TestHistory(suite, test_id, points)
        return found

    def __contains__(self, test_id: object) -> bool:
        return any(test_id in column for column in self._columns)

    def __iter__(self) -> Iterator[str]:
        return iter(self._ids)

    def __len__(self) -> int:
        return len(self._ids)


def newest(runs: Sequence[tuple[Run, R]], count: int) -> list[tuple[Run, R]]:
    """The `count` newest of `runs`."""
    ordered = sorted(runs, key=lambda item: (item[0].created_at or "", item[0].run_id or 0))
    return ordered[-count:] if count > 0 else []


def lets_through(policy: Policy, verdict: Verdict, test: TestResult, standing: Standing) -> bool:
    """`--fail-on ...,allow-known`: a red (or flaky) test that gates, has no blocker, and
    already failed in the base branch's history does not gate. A merged blocker promised
    it green, and a test that never failed there is this PR's doing until shown otherwise."""
    return (
        policy.allow_known
        and standing is Standing.KNOWN
        and not test.blocked_by
        and (verdict in UNEXCUSED_RED or verdict is Verdict.FLAKY)
    )
