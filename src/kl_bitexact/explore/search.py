"""Hypothesis's generation and shrinker under a time budget, seeded.

`hypothesis.find` is run in rounds of ROUND_EXAMPLES examples, drawing from one seeded
random (after replaying the failures an example database holds from earlier runs, when
one is given), until a workload diverges or the budget is spent; the round that finds one shrinks
it (fewer steps, requests, tokens) until shrinking stops or the budget ends. Every failing
workload seen is kept as it is seen, so a stop signal loses none of what was found.

`run` is called again after each finding is handed back, to search on with the budget
left for a different bug (`kinds.py` tells them apart): a workload that fails only with a
bug already reported is counted (`Tally.seen_again`) and searched past, and its entry in
the example database is kept (`examples.Keeping`), up to `max_findings` a run.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.control import current_build_context
from hypothesis.database import choices_to_bytes
from hypothesis.errors import Flaky, NoSuchExample

from kl_bitexact.explore import floor, hits
from kl_bitexact.explore.examples import Examples
from kl_bitexact.explore.execute import Divergence, Finding, Outcome, execute
from kl_bitexact.explore.floor import FloorVerdict
from kl_bitexact.explore.geometry import Geometry
from kl_bitexact.explore.kinds import Kind, kind_of
from kl_bitexact.explore.strategy import workloads
from kl_bitexact.explore.workload import TOGETHER, Tokens, Workload, smaller
from kl_bitexact.run.engines.base import Engine

ROUND_EXAMPLES = 20
PROGRESS_EVERY_S = 5.0
# Shrinking may use what is left of the budget, but at least this share of it.
SHRINK_SHARE = 0.3
# The last part of the shrinking time is kept for leaving out steps and prompts one by one.
LEAVE_OUT_SHARE = 0.3
# At most this many findings a run (--max-findings): each costs re-runs, a hand-back and
# two files, and a server with more different bugs than this has enough to fix first.
MAX_FINDINGS = 20


@dataclass
class Found:
    workload: Workload
    divergence: Finding  # a diverging token, or a cache hit the geometry does not allow
    kind: Kind  # the bug it shows: a later workload showing the same one is not reported


@dataclass
class Tally:
    """What the search has done so far (read by the progress line and results.json)."""

    examples: int = 0
    requests: int = 0
    # Requests the server reported served partly from its host tier (what pressure is for).
    restored: int = 0
    # Requests whose answer carried no cached_tokens: their hits could not be judged.
    hits_unreported: int = 0
    # A server that is not deterministic: workloads the noise-floor rule judged, and those
    # it could not (why -> how many), never counted as passed.
    floor_judged: int = 0
    not_judged: dict[str, int] = field(default_factory=dict)
    # The largest share of the rule's bound a judged workload's KL reached (1: diverged).
    floor_nearest: float | None = None
    found: Found | None = None  # the finding being shrunk (None once it is handed over)
    shrinks: int = 0
    # Each bug reported so far, in order, with how many more workloads failed only with it.
    reported: dict[Kind, int] = field(default_factory=dict)
    first_found_s: float | None = None
    first_found_workloads: int | None = None  # workloads run when the first one failed
    started: float = field(default_factory=time.monotonic)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @property
    def seen_again(self) -> int:
        """Failing workloads that showed only bugs already reported."""
        return sum(self.reported.values())


class Search:
    def __init__(
        self,
        engine: Engine,
        geometry: Geometry,
        *,
        budget_s: float,
        seed: int,
        progress: Callable[[str], None],
        kept: Callable[[], None] = lambda: None,
        examples: Examples | None = None,
        sends: tuple[str, ...] = (TOGETHER,),
        max_findings: int = MAX_FINDINGS,
    ) -> None:
        self.engine = engine
        self.geometry = geometry
        self.budget_s = budget_s
        self.seed = seed
        self.progress = progress
        # Told whenever a smaller failing workload is kept (results.json is rewritten, so
        # even a SIGKILL leaves the finding on disk).
        self.kept = kept
        # Failures found by earlier runs, replayed before anything new is generated.
        self.examples = examples
        # How the adapter can send a batch (workload.SENDS): in one call, apart, hung up on.
        self.sends = sends
        self.max_findings = min(max_findings, MAX_FINDINGS)
        self.tokens = Tokens(geometry.vocab_size, seed)
        self.tally = Tally()
        self._said = 0.0
        self._leaving_out = False
        self._found_at: float | None = None  # when the finding being shrunk was found
        self._first: Kind | None = None  # the kind it showed when found (before shrinking)
        # A kind a workload showed when found -> the reported kind it shrank to.
        self._aliases: dict[Kind, Kind] = {}
        self._draw = random.Random(seed)  # one seeded random across every round of every run
        # Each workload's findings' kinds as measured: Hypothesis calls the condition again
        # on the example it returns, and a budget spent in between must not turn that
        # answer around (it raises FlakyFailure when one does).
        self._verdicts: dict[Workload, tuple[Kind, ...]] = {}

    def longest(self) -> int:
        return max(self.geometry.boundaries().values()) * 3 + 1

    def run(self) -> Found | None:
        """Search until a workload shows a bug not reported yet (then shrink it), or the
        budget is spent, or `max_findings` were found; the finding, or None. The finding
        before (the caller has handed it back) is reported from here on."""
        if self.tally.found is not None:
            self.tally.reported.setdefault(self.tally.found.kind, 0)
            self.tally.found = None
        self._found_at = None  # searching again: the budget alone bounds it
        while not self.full and not self._out_of_time():
            found = self._search()
            if found is None:
                return None
            known = self._known(found.kind)
            assert self._first is not None
            self._aliases[self._first] = known or found.kind
            if known is None:
                return found
            # It shrank to a bug already reported (what it held besides was not needed):
            # a workload showing what it first showed is that bug from here on.
            self.tally.reported[known] += 1
            self.tally.found, self._found_at = None, None
            self.progress(f"explore: it shrank to a bug already reported ({known}); searching on")
        return None

    def _search(self) -> Found | None:
        """Rounds until a workload shows a bug not reported yet, then shrink it."""
        self._leaving_out, self._found_at, self._first = False, None, None
        self.tally.shrinks = 0  # counted per finding
        strategy = workloads(self.geometry, self.longest(), self.sends)
        while self.tally.found is None and not self._out_of_time():
            try:
                _find(strategy, self._diverges, _settings(self.examples), self._draw, self)
            except NoSuchExample:
                continue
            except Flaky:
                # A workload that diverged once and not again (a server that is not
                # deterministic after all): what diverged is kept; re-runs say how often.
                break
        self._leave_out()
        return self.tally.found

    def _known(self, kind: Kind) -> Kind | None:
        """The reported bug `kind` is: itself, or the one a workload showing it shrank to."""
        if kind in self.tally.reported:
            return kind
        known = self._aliases.get(kind)
        return known if known in self.tally.reported else None

    @property
    def full(self) -> bool:
        """Whether `max_findings` bugs were reported: the search is over."""
        return len(self.tally.reported) >= self.max_findings

    def fails_as_reported(self, workload: Workload) -> bool:
        """Whether `workload` was seen failing, only with bugs already reported."""
        kinds = self._verdicts.get(workload, ())
        return bool(kinds) and all(self._known(kind) for kind in kinds)

    def _leave_out(self) -> None:
        """Leave out steps and prompts one at a time while the workload still diverges
        (measured: Hypothesis alone stopped at 7 requests for seed 3 where 3 suffice)."""
        self._leaving_out = True
        progressed = self.tally.found is not None
        while progressed and not self._out_of_time():
            assert self.tally.found is not None
            progressed = any(self._diverges(c) for c in smaller(self.tally.found.workload))

    def _diverges(self, workload: Workload) -> bool:
        """Whether `workload` shows a bug not reported yet (while one is shrunk: the same
        core as the kind it first showed, `_new`)."""
        known = self._verdicts.get(workload)
        if known is None and not self._out_of_time():
            outcome = execute(self.engine, workload, self.tokens, self.geometry)
            known = tuple(kind_of(finding, self.geometry) for finding in outcome.findings)
            self._verdicts[workload] = known
            self._count(workload, outcome, known)
            new = self._new(known)
            if new is not None:
                self._keep(workload, outcome.findings[known.index(new)], new)
        return self._new(known or ()) is not None

    def _new(self, kinds: tuple[Kind, ...]) -> Kind | None:
        """The first of `kinds` not reported yet; while one is shrunk, the first with the
        same core as the kind it first showed (what it held besides - a hang-up, a
        restore, requests sent apart - may be left out; then it may turn out to be a bug
        already reported, which `run` says)."""
        for kind in kinds:
            if self._first is None and self._known(kind) is None:
                return kind
            if self._first is not None and kind.core == self._first.core:
                return kind
        return None

    def _count(self, workload: Workload, outcome: Outcome, kinds: tuple[Kind, ...]) -> None:
        self.tally.examples += 1
        known = [self._known(kind) for kind in kinds]
        if known and self.tally.found is None and all(known):
            self.tally.reported[known[0] or kinds[0]] += 1
        self.tally.requests += workload.requests
        self.tally.restored += sum(1 for s in outcome.served if s.generation.cached_from_host)
        self.tally.hits_unreported += hits.unreported(outcome.served)
        if outcome.floor is not None:
            self._count_floor(outcome.floor)
        if time.monotonic() - self._said >= PROGRESS_EVERY_S:
            self._said = time.monotonic()
            self.progress(self._line())

    def _count_floor(self, verdict: FloorVerdict) -> None:
        tally = self.tally
        if verdict.cannot_tell:
            tally.not_judged[verdict.cannot_tell] = tally.not_judged.get(verdict.cannot_tell, 0) + 1
            return
        tally.floor_judged += 1
        share = floor.share_of_bound(verdict)
        if share is not None and (tally.floor_nearest is None or share > tally.floor_nearest):
            tally.floor_nearest = share

    def _keep(self, workload: Workload, divergence: Finding, kind: Kind) -> None:
        """Keep `workload` when it is the first or the smallest failing one so far; kept
        before anything is said, so a stop signal while saying it loses nothing."""
        best = self.tally.found
        if best is not None and _size(workload) >= _size(best.workload):
            return
        self.tally.found = Found(workload, divergence, kind)
        self.kept()
        if best is not None:
            self.tally.shrinks += 1
            return
        self._found_at, self._first = self.tally.elapsed(), kind
        if self.tally.first_found_s is None:
            self.tally.first_found_s = self._found_at
            self.tally.first_found_workloads = self.tally.examples
        what = "a divergence" if isinstance(divergence, Divergence) else "a miscounted cache hit"
        self.progress(
            f"explore: found {what} after {self._found_at:.1f} s "
            f"({workload.requests} requests; {kind}); shrinking"
        )

    def _out_of_time(self) -> bool:
        spent = self.tally.elapsed()
        if self._found_at is None:
            return spent >= self.budget_s
        shrink_until = self._shrink_until(self._found_at)
        window = shrink_until - self._found_at
        reserve = 0.0 if self._leaving_out else LEAVE_OUT_SHARE * window
        return spent >= shrink_until - reserve

    def _shrink_until(self, found_at: float) -> float:
        """When shrinking the finding found at `found_at` stops: the last finding the cap
        allows may use what is left of the budget; one before it at most half of that, so
        the search goes on (measured: a miscount found 2.9 s in was shrunk until 48 s of a 60 s
        budget, and the second fault was not found). Each gets at least SHRINK_SHARE of
        the budget, which is how far past the budget shrinking may run."""
        least = found_at + SHRINK_SHARE * self.budget_s
        if len(self.tally.reported) + 1 >= self.max_findings:
            return max(self.budget_s, least)
        return max(found_at + (self.budget_s - found_at) / 2, least)

    def _line(self) -> str:
        state = "shrinking" if self.tally.found else "nothing found yet"
        if self.tally.reported and not self.tally.found:
            state = f"{len(self.tally.reported)} found, searching on"
        return (
            f"explore: {self.tally.examples} workloads, {self.tally.requests} requests, "
            f"{self.tally.elapsed():.0f} s of {self.budget_s:.0f} s, {state}"
        )


def _size(workload: Workload) -> tuple[int, int, int]:
    """Smaller is simpler: fewer requests, then fewer steps, then fewer prompt names."""
    named = sum(p.shared + p.own for step in workload.steps for p in getattr(step, "prompts", ()))
    return (workload.requests, len(workload.steps), named)


class _Found(Exception):
    """Raised inside the Hypothesis test when a workload diverges (as `find` does)."""


def _find(
    strategy: st.SearchStrategy[Workload],
    condition: Callable[[Workload], bool],
    chosen: settings,
    draw: random.Random,
    search: Search,
) -> Workload:
    """`hypothesis.find`, seeded, with an example database: `find(random=...)` applies
    `hypothesis.seed`, which turns the database off. The two attributes set here are the
    ones `seed` and `find` set (tests/explore: a second run replays the first's failure).
    A workload that fails only with bugs already reported is not interesting to the round,
    but its entry in the database is kept (the choices that drew it, as Hypothesis saves
    them)."""
    last: list[Workload] = []
    examples = search.examples

    @chosen
    @given(strategy)
    def test(workload: Workload) -> None:
        if condition(workload):
            last[:] = [workload]
            raise _Found
        if examples is not None and search.fails_as_reported(workload):
            examples.keep(choices_to_bytes(current_build_context().data.choices))

    test._hypothesis_internal_use_seed = draw.getrandbits(64)  # type: ignore[attr-defined]
    if examples is not None:
        test._hypothesis_internal_database_key = examples.key  # type: ignore[attr-defined]
    try:
        test()
    except _Found:
        return last[0]
    raise NoSuchExample("no workload diverged")


def _settings(examples: Examples | None) -> settings:
    reuse = [Phase.reuse] if examples else []
    return settings(
        max_examples=ROUND_EXAMPLES,
        deadline=None,
        database=examples.database if examples else None,
        phases=[*reuse, Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
    )
