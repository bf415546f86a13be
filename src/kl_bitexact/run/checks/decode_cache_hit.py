"""`decode_cache_hit`: turn 2 resumes from state the cache kept while decoding turn 1.

Phases: turn 1 generate (cold), turn 2 = prompt + output + separator generate, keep
samples with cached_tokens > len(prompt) + 1 (sglang's rule), replay turn 2 (cold), then
the noise floor: turn 2 generated cold against that replay.
"""

from __future__ import annotations

from collections.abc import Sequence

from kl_bitexact.results.model import CacheHits, TestResult
from kl_bitexact.run.checks import metrics, prompts, scoring
from kl_bitexact.run.checks.phases import Phases
from kl_bitexact.run.checks.scoring import Context
from kl_bitexact.run.engines.base import Generation
from kl_bitexact.suite.model import TestSpec


def run(phases: Phases, spec: TestSpec, test_id: str | None = None) -> TestResult:
    context = scoring.begin(phases.engine, spec, test_id)
    if not context.geometry.radix_cache:
        return scoring.not_run(context, scoring.RADIX_DISABLED)
    first = prompts.single_turn(spec, context.info)
    # Always sent (turn 2 needs the state it leaves); a later `match` may reuse it.
    turn1 = phases.generate_cold(first, scoring.sampling(spec))
    second = [p + g.output_ids + spec.separator_ids for p, g in zip(first, turn1, strict=True)]
    generations = phases.engine.generate(second, scoring.sampling(spec))
    if scoring.unreported(generations):
        return scoring.not_run(context, scoring.NO_CACHED_TOKENS)
    kept = [i for i, g in enumerate(generations) if (g.cached_tokens or 0) > len(first[i]) + 1]
    expected, at_risk = predict(context, first, turn1)
    notes = scoring.geometry_warnings(context, expected, len(first))
    held = metrics.held_tokens(
        [len(p) + len(g.output_ids) for p, g in zip(first, turn1, strict=True)],
        [len(spec.separator_ids) + spec.max_new_tokens] * len(first),
        context.geometry.page_size,
    )
    notes += scoring.budget_warnings(context, held)
    if at_risk:
        notes += (
            f"speculative decoding (block {context.geometry.speculative_block}): up to "
            f"{at_risk} samples may miss because the last checkpoint falls in overshoot tokens",
        )
    samples = scoring.replay_and_pair(phases, second, generations, kept)
    measured = scoring.Measured(
        samples=samples,
        floor=scoring.no_cache_floor(phases, second, scoring.sampling(spec), samples),
        hits=CacheHits(
            len(kept),
            len(first),
            spec.min_cache_hit_ratio,
            scoring.predicted_hits(context, expected, len(first)),
        ),
        hit_label="decode",
        warnings=notes,
    )
    return scoring.judge(context, measured)


def predict(
    context: Context, first: Sequence[prompts.Prompt], turn1: Sequence[Generation]
) -> tuple[int, int]:
    """Samples the geometry lets hit, and those speculative overshoot may cost."""
    pairs = [(len(p), len(g.output_ids)) for p, g in zip(first, turn1, strict=True)]
    geometry = context.geometry
    possible = sum(metrics.decode_hit_possible(n, out, geometry) for n, out in pairs)
    at_risk = sum(metrics.overshoot_may_miss(n, out, geometry) for n, out in pairs)
    return possible, at_risk
