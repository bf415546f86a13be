"""`decode_cache_hit`: turn 2 resumes from state the cache kept while decoding turn 1.

Phases: flush, turn 1 generate, turn 2 = prompt + output + separator generate, keep
samples with cached_tokens > len(prompt) + 1 (sglang's rule), flush, replay turn 2.
"""

from __future__ import annotations

import time

from kl_bitexact.checks import metrics, prompts, scoring
from kl_bitexact.checks.match import sampling
from kl_bitexact.checks.metrics import Geometry
from kl_bitexact.checks.prefill_cache_hit import (
    NO_CACHED_TOKENS,
    RADIX_DISABLED,
    unreported,
    warnings,
)
from kl_bitexact.engines.base import Engine
from kl_bitexact.results import CacheHits, TestResult
from kl_bitexact.suite import TestSpec


def run(engine: Engine, spec: TestSpec, test_id: str | None = None) -> TestResult:
    started, name = time.monotonic(), test_id or spec.name
    info = engine.server_info()
    geometry = Geometry.from_server_info(info)
    if not geometry.radix_cache:
        return scoring.not_run(spec, name, RADIX_DISABLED, started)
    first = prompts.single_turn(spec, info)
    engine.flush()
    turn1 = engine.generate(first, sampling(spec))
    second = [p + g.output_ids + spec.separator_ids for p, g in zip(first, turn1, strict=True)]
    generations = engine.generate(second, sampling(spec))
    if unreported(generations):
        return scoring.not_run(spec, name, NO_CACHED_TOKENS, started)
    kept = [i for i, g in enumerate(generations) if (g.cached_tokens or 0) > len(first[i]) + 1]
    expected = sum(
        metrics.decode_hit_possible(len(p), len(g.output_ids), geometry)
        for p, g in zip(first, turn1, strict=True)
    )
    at_risk = sum(
        metrics.overshoot_may_miss(len(p), len(g.output_ids), geometry)
        for p, g in zip(first, turn1, strict=True)
    )
    notes = warnings(expected, len(first), spec, geometry)
    if at_risk:
        notes += (
            f"speculative decoding (block {geometry.speculative_block}): up to {at_risk} "
            "samples may miss because the last checkpoint falls in overshoot tokens",
        )
    measured = scoring.Measured(
        samples=scoring.replay_and_pair(engine, second, generations, kept),
        hits=CacheHits(len(kept), len(first), spec.min_cache_hit_ratio, expected),
        hit_label="decode",
        warnings=notes,
    )
    return scoring.judge(spec, name, measured, geometry, started)
