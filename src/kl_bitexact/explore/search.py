"""Hypothesis's generation and shrinker under a time budget, seeded.

`hypothesis.find` is run in rounds of ROUND_EXAMPLES examples, drawing from one seeded
random (after replaying the failures an example database holds from earlier runs, when
one is given), until a workload diverges or the budget is spent; the round that finds one shrinks
it (fewer steps, requests, tokens) until shrinking stops or the budget ends. Every failing
workload seen is kept as it is seen, so a stop signal loses none of what was found.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Flaky, NoSuchExample

from kl_bitexact.explore import floor, hits
from kl_bitexact.explore.examples import Examples
from kl_bitexact.explore.execute import Divergence, Finding, Outcome, execute
from kl_bitexact.explore.floor import FloorVerdict
from kl_bitexact.explore.geometry import Geometry
from kl_bitexact.explore.strategy import workloads
from kl_bitexact.explore.workload import TOGETHER, Tokens, Workload, smaller
from kl_bitexact.run.engines.base import Engine

ROUND_EXAMPLES = 20
PROGRESS_EVERY_S = 5.0
# Shrinking may use what is left of the budget, but at least this share of it.
SHRINK_SHARE = 0.3
# The last part of the shrinking time is kept for leaving out steps and prompts one by one.
LEAVE_OUT_SHARE = 0.3


@dataclass
class Found:
    workload: Workload
    divergence: Finding  # a diverging token, or a cache hit the geometry does not allow


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
    found: Found | None = None
    shrinks: int = 0
    first_found_s: float | None = None
    first_found_workloads: int | None = None  # workloads run when the first one failed
    started: float = field(default_factory=time.monotonic)

    def elapsed(self) -> float:
        return time.monotonic() - self.started


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
        self.tokens = Tokens(geometry.vocab_size, seed)
        self.tally = Tally()
        self._said = 0.0
        self._leaving_out = False
        # Each workload's verdict as measured: Hypothesis calls the condition again on the
        # example it returns, and a budget spent in between must not turn that answer
        # around (it raises FlakyFailure when one does).
        self._verdicts: dict[Workload, bool] = {}

    def longest(self) -> int:
        return max(self.geometry.boundaries().values()) * 3 + 1

    def run(self) -> Tally:
        """Search until a workload diverges (then shrink it) or the budget is spent."""
        draw = random.Random(self.seed)
        strategy = workloads(self.geometry, self.longest(), self.sends)
        while self.tally.found is None and not self._out_of_time():
            try:
                _find(strategy, self._diverges, _settings(self.examples), draw, self.examples)
            except NoSuchExample:
                continue
            except Flaky:
                # A workload that diverged once and not again (a server that is not
                # deterministic after all): what diverged is kept; re-runs say how often.
                break
        self._leave_out()
        return self.tally

    def _leave_out(self) -> None:
        """Leave out steps and prompts one at a time while the workload still diverges
        (measured: Hypothesis alone stopped at 7 requests for seed 3 where 3 suffice)."""
        self._leaving_out = True
        progressed = self.tally.found is not None
        while progressed and not self._out_of_time():
            assert self.tally.found is not None
            progressed = any(self._diverges(c) for c in smaller(self.tally.found.workload))

    def _diverges(self, workload: Workload) -> bool:
        known = self._verdicts.get(workload)
        if known is not None or self._out_of_time():
            return bool(known)
        outcome = execute(self.engine, workload, self.tokens, self.geometry)
        self._count(workload, outcome)
        self._verdicts[workload] = bool(outcome.findings)
        if not outcome.findings:
            return False
        self._keep(workload, outcome.findings[0])
        return True

    def _count(self, workload: Workload, outcome: Outcome) -> None:
        self.tally.examples += 1
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

    def _keep(self, workload: Workload, divergence: Finding) -> None:
        """Keep `workload` when it is the first or the smallest failing one so far; kept
        before anything is said, so a stop signal while saying it loses nothing."""
        best = self.tally.found
        if best is not None and _size(workload) >= _size(best.workload):
            return
        self.tally.found = Found(workload, divergence)
        self.kept()
        if best is not None:
            self.tally.shrinks += 1
            return
        self.tally.first_found_s = self.tally.elapsed()
        self.tally.first_found_workloads = self.tally.examples
        what = "a divergence" if isinstance(divergence, Divergence) else "a miscounted cache hit"
        self.progress(
            f"explore: found {what} after {self.tally.first_found_s:.1f} s "
            f"({workload.requests} requests); shrinking"
        )

    def _out_of_time(self) -> bool:
        spent = self.tally.elapsed()
        if self.tally.first_found_s is None:
            return spent >= self.budget_s
        shrink_until = max(self.budget_s, self.tally.first_found_s + SHRINK_SHARE * self.budget_s)
        reserve = 0.0 if self._leaving_out else LEAVE_OUT_SHARE * self.budget_s
        return spent >= shrink_until - reserve

    def _line(self) -> str:
        state = "shrinking" if self.tally.found else "nothing found yet"
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
    examples: Examples | None,
) -> Workload:
    """`hypothesis.find`, seeded, with an example database: `find(random=...)` applies
    `hypothesis.seed`, which turns the database off. The two attributes set here are the
    ones `seed` and `find` set (tests/explore: a second run replays the first's failure)."""
    last: list[Workload] = []

    @chosen
    @given(strategy)
    def test(workload: Workload) -> None:
        if condition(workload):
            last[:] = [workload]
            raise _Found

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
