"""`pressure_restore`: a shared prefix evicted under pressure, restored, and reused.

Phases: flush; seed each group's prefix (no new tokens: its end holds a checkpoint), then
its `branches` prompts (prefix + a suffix) in one batch, so the prefix is a branch point
of the cache; pressure: fresh prompts of `pressure` x the device pool the server reports
(`max_total_tokens`), no new tokens, so every page cached before them is evicted to the
host tier; the probe: each prefix + a fresh suffix, generated, then replayed uncached and
compared. A probe is a hit when it reused the prefix; that the prefix came back from the
host tier is read from the server (`cached_tokens_details.host`), never assumed: a server
that does not say, or a probe served from the device, proves no restore, and the test
fails saying so. No host tier, no pool reported, or a pool too large to fill within
MAX_PRESSURE_TOKENS: not run, with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from kl_bitexact.results.model import CacheHits, TestResult
from kl_bitexact.run.checks import prompts, scoring
from kl_bitexact.run.checks.phases import Phases
from kl_bitexact.run.engines.base import Engine, Generation
from kl_bitexact.suite.model import TestSpec

# Pressure is bounded: a pool larger than this many tokens / `pressure` is not filled.
MAX_PRESSURE_TOKENS = 4_000_000
# Each pressure prompt is at most this long (and shorter than the context), sent at most
# PRESSURE_BATCH to a request.
PRESSURE_PROMPT_TOKENS = 2048
PRESSURE_BATCH = 32
NO_HOST_TIER = (
    "the server has no host tier (enable_hierarchical_cache): an evicted prefix is "
    "dropped, so there is no restore to check"
)


def run(phases: Phases, spec: TestSpec, test_id: str | None = None) -> TestResult:
    engine = phases.engine
    context = scoring.begin(engine, spec, test_id)
    refused = _refusal(context)
    if refused:
        return scoring.not_run(context, refused)
    vocab = prompts.vocab_size(spec, context.info)
    rng = np.random.default_rng(spec.seed)
    prefixes = [prompts.token_ids(rng, spec.prefix_tokens, vocab) for _ in range(spec.groups)]
    suffix = spec.turn_suffix_tokens[0]
    engine.flush()
    engine.generate(prefixes, scoring.sampling(spec, max_new_tokens=0))
    branches = [
        p + prompts.token_ids(rng, suffix, vocab) for p in prefixes for _ in range(spec.branches)
    ]
    engine.generate(branches, scoring.sampling(spec))
    press(engine, context, rng, vocab)
    probes = [p + prompts.token_ids(rng, suffix, vocab) for p in prefixes]
    generations = engine.generate(probes, scoring.sampling(spec))
    if scoring.unreported(generations):
        return scoring.not_run(context, scoring.NO_CACHED_TOKENS)
    kept = [i for i, g in enumerate(generations) if g.cached_tokens]
    samples = scoring.replay_and_pair(phases, probes, generations, kept)
    measured = scoring.Measured(
        samples=samples,
        # The probes with no cache, so that gate: noise-floor judges this check as the
        # other cache checks (an engine that is not deterministic drifts without a cache).
        floor=scoring.no_cache_floor(phases, probes, scoring.sampling(spec), samples),
        hits=CacheHits(len(kept), len(probes), spec.min_cache_hit_ratio, len(probes)),
        hit_label="restored",
        problems=not_restored(generations, kept),
    )
    return scoring.judge(context, measured)


def _refusal(context: scoring.Context) -> str | None:
    """Why this server cannot be put under pressure (None: it can)."""
    geometry = context.geometry
    if not geometry.radix_cache:
        return scoring.RADIX_DISABLED
    if geometry.host_ratio is None:
        return NO_HOST_TIER
    pool = geometry.token_budget
    if pool is None:
        return (
            "the server does not report its device pool (max_total_tokens): pressure "
            "cannot be sized to evict"
        )
    if pool * context.spec.pressure > MAX_PRESSURE_TOKENS:
        return (
            f"the device pool ({pool} tokens) x pressure {context.spec.pressure:g} is over "
            f"{MAX_PRESSURE_TOKENS} tokens: too large to fill here; start the server with a "
            "smaller --max-total-tokens"
        )
    return None


def press(engine: Engine, context: scoring.Context, rng: np.random.Generator, vocab: int) -> int:
    """Send fresh prompts of `pressure` x the device pool (no new tokens); the tokens sent."""
    pool = context.geometry.token_budget
    assert pool is not None, "_refusal checked the pool"
    total = math.ceil(pool * context.spec.pressure)
    length = min(PRESSURE_PROMPT_TOKENS, _longest_prompt(context))
    lengths = [length] * (total // length) + ([total % length] if total % length else [])
    for first in range(0, len(lengths), PRESSURE_BATCH):
        batch = [prompts.token_ids(rng, n, vocab) for n in lengths[first : first + PRESSURE_BATCH]]
        engine.generate(batch, scoring.sampling(context.spec, max_new_tokens=0))
    return total


def _longest_prompt(context: scoring.Context) -> int:
    reported = context.info.get("context_length")
    if isinstance(reported, int) and not isinstance(reported, bool) and reported > 2:
        return reported - 1
    return PRESSURE_PROMPT_TOKENS


def not_restored(generations: Sequence[Generation], kept: Sequence[int]) -> tuple[str, ...]:
    """Each hit that does not show a restore from the host tier: the check proves nothing
    about restores unless the server says the prefix came back from there."""
    found = []
    for i in kept:
        host = generations[i].cached_from_host
        if host is None:
            found.append(
                f"probe {i}: the server does not report cached_tokens_details.host, so "
                "whether the prefix came back from the host tier cannot be told"
            )
        elif host == 0:
            found.append(
                f"probe {i}: cached {generations[i].cached_tokens} tokens, none from the host "
                "tier: the pressure did not evict the prefix (raise `pressure`)"
            )
    return tuple(found)
