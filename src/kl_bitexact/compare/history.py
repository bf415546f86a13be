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
    # A floor measured whose KL was not recorded: "cannot tell" how noisy that run was,
    # which is not the same as a run that measured no floor (another gate mode).
    floor_lost: bool = False

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
            floor is not None and floor.kl is None,
        )

    @property
    def failed(self) -> bool:
        return self.status in FAILED_ON_BASE

    @property
    def numbers(
        self,
    ) -> tuple[float | None, int | None, int | None, int | None, int | None, float | None]:
        """What must be identical from one run to the next (the status follows from it;
        `floor_lost` from `floor`)."""
        return self[1:7]


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
    tests: Tests = field(default_factory=lambda: Tests({}, {}))
    # Why there is no history, or what limited it (runs passed over, a bound reached):
    # shown with it, never silently.
    notes: tuple[str, ...] = ()

    def of(self, test_id: str) -> TestHistory | None:
        return self.tests.get(test_id)

    def standing(self, test_id: str) -> Standing:
        return self.tests.standing(test_id)

    def commit_at(self, index: int | None) -> str | None:
        return None if index is None else self.runs[index].commit

    @property
    def attention(self) -> list[TestHistory]:
        """Tests that failed or whose numbers changed in the history (the rest are steady)."""
        return self.tests.attention()


def build(
    branch: str, runs: Sequence[tuple[Run, RunResults]], notes: Iterable[str] = ()
) -> History:
    """The history of `runs` (any order; sorted oldest first by their time, then id)."""
    collector = Collector()
    for run, results in runs:
        collector.add(run, results)
    return collector.history(branch, notes=notes)


def _when(run: Run) -> tuple[str, int]:
    return (run.created_at or "", run.run_id or 0)


class _Track:
    """One test across the runs added so far: each distinct `Point` it had, with the runs
    (bits of a mask, in the order they were added) that reported it so. A test whose numbers
    never change is one point and one mask, however many runs there are."""

    __slots__ = ("suite", "suite_run", "values")

    def __init__(self, suite: str, run: int, point: Point, bit: int) -> None:
        self.suite, self.suite_run = suite, run  # the suite of the oldest run reporting it
        self.values = {point: bit}


class Collector:
    """The history, one run at a time (issue 40): a run's tests are folded into each test's
    track and the run itself dropped, so reading 100 runs of 10,000 tests holds one run and
    the tracks (a few hundred bytes a test), not 100 runs. Equal points are one object."""

    def __init__(self) -> None:
        self._runs: list[Run] = []
        self._tracks: dict[str, _Track] = {}
        self._points: dict[tuple[object, ...], Point] = {}

    def __len__(self) -> int:
        return len(self._runs)

    def add(self, run: Run, results: RunResults) -> None:
        index = len(self._runs)
        bit, when = 1 << index, _when(run)
        self._runs.append(run)
        tracks, points, runs = self._tracks, self._points, self._runs
        for suite, test in results.all_tests():
            # Keyed by what Point.of reads (hashable: frozen), so a Point is built once per
            # distinct set of numbers, not once per test and run (most of a run is alike).
            key = (test.status, test.kl_div, test.exact, test.cache_hits, test.noise_floor)
            point = points.get(key)
            if point is None:
                point = points[key] = Point.of(test)
            track = tracks.get(test.id)
            if track is None:
                tracks[test.id] = _Track(suite.name, index, point, bit)
                continue
            values = track.values
            values[point] = values.get(point, 0) | bit
            if suite.name != track.suite and when < _when(runs[track.suite_run]):
                track.suite, track.suite_run = suite.name, index

    def history(self, branch: str, count: int | None = None, notes: Iterable[str] = ()) -> History:
        """The newest `count` runs added (all by default), oldest first."""
        order = sorted(range(len(self._runs)), key=lambda index: _when(self._runs[index]))
        if count is not None:
            order = order[-count:] if count > 0 else []
        runs = tuple(self._runs[index] for index in order)
        positions = {added: position for position, added in enumerate(order)}
        return History(branch, runs, Tests(self._tracks, positions), tuple(notes))


class Tests(Mapping[str, TestHistory]):
    """Each test's history, its points laid out when it is first asked for: `report` asks
    only for the tests that need attention; a test's standing and steadiness are read off its
    track (`_Track`) without laying out a point per run."""

    def __init__(self, tracks: Mapping[str, _Track], positions: Mapping[int, int]) -> None:
        # positions: the index in the order runs were added -> its index in the history.
        self._tracks = tracks
        self._positions = positions
        self._mask = sum(1 << index for index in positions)
        self._built: dict[str, TestHistory] = {}
        self._ids: list[str] | None = None

    def _present(self, track: _Track) -> dict[Point, int]:
        """The track's points in the history's runs (runs left out of the window dropped)."""
        mask = self._mask
        return {point: bits & mask for point, bits in track.values.items() if bits & mask}

    def __getitem__(self, test_id: str) -> TestHistory:
        found = self._built.get(test_id)
        if found is None:
            track = self._tracks.get(test_id)
            values = self._present(track) if track is not None else {}
            if track is None or not values:
                raise KeyError(test_id)
            points: list[Point | None] = [None] * len(self._positions)
            for point, bits in values.items():
                while bits:
                    low = bits & -bits
                    points[self._positions[low.bit_length() - 1]] = point
                    bits ^= low
            found = self._built[test_id] = TestHistory(track.suite, test_id, tuple(points))
        return found

    def standing(self, test_id: str) -> Standing:
        track = self._tracks.get(test_id)
        values = self._present(track) if track is not None else {}
        if not values:
            return Standing.UNSEEN
        return Standing.KNOWN if any(point.failed for point in values) else Standing.NEW

    def attention(self) -> list[TestHistory]:
        return [self[test_id] for test_id in self if not self._steady(self._tracks[test_id])]

    def _steady(self, track: _Track) -> bool:
        """Never failed, and one set of numbers in every run that reported it (two distinct
        sets are always next to each other somewhere: that is a change)."""
        values = self._present(track)
        return not any(p.failed for p in values) and len({p.numbers for p in values}) <= 1

    def __contains__(self, test_id: object) -> bool:
        track = self._tracks.get(test_id) if isinstance(test_id, str) else None
        return track is not None and bool(self._present(track))

    def __iter__(self) -> Iterator[str]:
        if self._ids is None:
            self._ids = self._in_order()
        return iter(self._ids)

    def _in_order(self) -> list[str]:
        """The tests of the history's runs, in order of first appearance, oldest run first."""
        present = [test_id for test_id, track in self._tracks.items() if self._present(track)]
        added = list(self._positions)
        if added == sorted(added):
            return present  # runs were added oldest first: the order they came in
        first = {test_id: self._first_position(self._tracks[test_id]) for test_id in present}
        return sorted(present, key=first.__getitem__)  # stable: file order within a run

    def _first_position(self, track: _Track) -> int:
        bits = 0
        for value in self._present(track).values():
            bits |= value
        return min(self._positions[i] for i in range(bits.bit_length()) if bits >> i & 1)

    def __len__(self) -> int:
        if self._ids is None:
            self._ids = self._in_order()
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
