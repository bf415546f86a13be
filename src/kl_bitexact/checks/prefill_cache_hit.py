"""`prefill_cache_hit`: generate from prompts whose prefix the cache already holds.

Phases: flush, warm (max_new_tokens=0), generate the same prompts, keep samples that
hit (cached_tokens > 0), flush, replay. Radix cache disabled -> not_run (sglang returns
early and passes; that would be a vacuous pass).
"""

from __future__ import annotations

import time

from kl_bitexact.checks import metrics, prompts, scoring
from kl_bitexact.checks.match import sampling
from kl_bitexact.checks.metrics import Geometry
from kl_bitexact.engines.base import Engine, Generation
from kl_bitexact.results import CacheHits, TestResult
from kl_bitexact.suite import TestSpec

RADIX_DISABLED = "radix cache disabled on the server (disable_radix_cache); nothing to hit"
NO_CACHED_TOKENS = "the server does not report cached_tokens, so hits cannot be counted"


def run(engine: Engine, spec: TestSpec, test_id: str | None = None) -> TestResult:
    started, name = time.monotonic(), test_id or spec.name
    info = engine.server_info()
    geometry = Geometry.from_server_info(info)
    if not geometry.radix_cache:
        return scoring.not_run(spec, name, RADIX_DISABLED, started)
    batch = prompts.single_turn(spec, info)
    engine.flush()
    engine.generate(batch, sampling(spec, max_new_tokens=0))
    generations = engine.generate(batch, sampling(spec))
    if unreported(generations):
        return scoring.not_run(spec, name, NO_CACHED_TOKENS, started)
    kept = [i for i, g in enumerate(generations) if g.cached_tokens]
    expected = sum(metrics.prefill_hit_possible(len(p), geometry) for p in batch)
    measured = scoring.Measured(
        samples=scoring.replay_and_pair(engine, batch, generations, kept),
        hits=CacheHits(len(kept), len(batch), spec.min_cache_hit_ratio, expected),
        hit_label="prefill",
        warnings=warnings(expected, len(batch), spec, geometry),
    )
    return scoring.judge(spec, name, measured, geometry, started)


def unreported(generations: list[Generation]) -> bool:
    return any(g.cached_tokens is None for g in generations)


def warnings(expected: int, total: int, spec: TestSpec, geometry: Geometry) -> tuple[str, ...]:
    text = metrics.geometry_warning(expected, total, spec.min_cache_hit_ratio, geometry)
    return (text,) if text else ()
