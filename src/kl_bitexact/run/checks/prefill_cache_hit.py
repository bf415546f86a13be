"""`prefill_cache_hit`: generate from prompts whose prefix the cache already holds.

Phases: warm (a cold request, max_new_tokens=0), generate the same prompts, keep samples
that hit (cached_tokens > 0), replay (a cold phase: not sent again when an earlier
check of the suite replayed exactly these sequences, as `match` does in a bit-exact
run), then the noise floor: the same prompts generated cold (`match`'s generation,
shared with a `match` of the same prompts) against that replay. Radix cache disabled ->
not_run (sglang returns early and passes; that would be a vacuous pass).
"""

from __future__ import annotations

import dataclasses

from kl_bitexact.results.model import CacheHits, TestResult
from kl_bitexact.run.checks import metrics, prompts, scoring
from kl_bitexact.run.checks.phases import Phases
from kl_bitexact.suite.model import TestSpec


def run(phases: Phases, spec: TestSpec, test_id: str | None = None) -> TestResult:
    engine = phases.engine
    context = scoring.begin(engine, spec, test_id)
    if not context.geometry.radix_cache:
        return scoring.not_run(context, scoring.RADIX_DISABLED)
    batch = prompts.single_turn(spec, context.info)
    engine.generate(batch, dataclasses.replace(scoring.sampling(spec, max_new_tokens=0), cold=True))
    generations = engine.generate(batch, scoring.sampling(spec))
    if scoring.unreported(generations):
        return scoring.not_run(context, scoring.NO_CACHED_TOKENS)
    kept = [i for i, g in enumerate(generations) if g.cached_tokens]
    expected = sum(metrics.prefill_hit_possible(len(p), context.geometry) for p in batch)
    samples = scoring.replay_and_pair(phases, batch, generations, kept)
    measured = scoring.Measured(
        samples=samples,
        floor=scoring.no_cache_floor(phases, batch, scoring.sampling(spec), samples),
        hits=CacheHits(
            len(kept),
            len(batch),
            spec.min_cache_hit_ratio,
            scoring.predicted_hits(context, expected, len(batch)),
        ),
        hit_label="prefill",
        warnings=scoring.geometry_warnings(context, expected, len(batch))
        + scoring.budget_warnings(
            context,
            metrics.held_tokens(
                [len(p) for p in batch],
                [spec.max_new_tokens] * len(batch),
                context.geometry.page_size,
            ),
        ),
    )
    return scoring.judge(context, measured)
