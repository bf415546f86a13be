"""The sglang KL scenarios, run in-process against the reference engine (test helpers)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kl_bitexact.reference.config import EngineConfig
from kl_bitexact.reference.engine import ReferenceEngine
from kl_bitexact.reference.protocol import GenerateResult, parse_generate

COMMA = 5


def engine(**settings: object) -> ReferenceEngine:
    settings.setdefault("enable_deterministic_inference", True)
    return ReferenceEngine(EngineConfig(**settings))  # type: ignore[arg-type]


def generate(
    target: ReferenceEngine, prompts: list[list[int]], new: int, start: int = -1, seed: int = 11
) -> list[GenerateResult]:
    body = {
        "input_ids": prompts,
        "sampling_params": {"max_new_tokens": new, "ignore_eos": True, "sampling_seed": seed},
        "return_logprob": True,
        "logprob_start_len": start,
    }
    requests, _ = parse_generate(body, target.limits)
    return target.generate(requests)


def replay(
    target: ReferenceEngine, sequences: list[list[int]], count: int
) -> list[tuple[float | None, ...]]:
    """Fresh-prefill logprobs of the last `count` tokens (logprob_start_len 0 reuses nothing)."""
    return [r.input_logprobs[-count:] for r in generate(target, sequences, 0, start=0)]


def prompts(count: int, low: int = 100, high: int = 300, seed: int = 1) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(1, 320, size=int(rng.integers(low, high))).tolist() for _ in range(count)]


@dataclass(frozen=True)
class Outcome:
    """Samples that hit the cache, and how many of those differ from a fresh prefill."""

    hits: int
    total: int
    mismatched: int
    cached: tuple[int, ...]


def _outcome(
    hits: list[bool], results: list[GenerateResult], fresh: list[tuple[float | None, ...]]
) -> Outcome:
    mismatched = sum(
        1
        for hit, result, scored in zip(hits, results, fresh, strict=True)
        if hit and tuple(result.output_logprobs) != tuple(scored)
    )
    cached = tuple(result.cached_tokens for result in results)
    return Outcome(sum(hits), len(hits), mismatched, cached)


def decode_cache_hit(target: ReferenceEngine, firsts: list[list[int]], new: int) -> Outcome:
    target.flush()
    turn1 = generate(target, firsts, new)
    seconds = [p + list(r.output_ids) + [COMMA] for p, r in zip(firsts, turn1, strict=True)]
    turn2 = generate(target, seconds, new)
    hits = [r.cached_tokens > len(p) + 1 for r, p in zip(turn2, firsts, strict=True)]
    target.flush()
    fresh = replay(
        target, [s + list(r.output_ids) for s, r in zip(seconds, turn2, strict=True)], new
    )
    return _outcome(hits, turn2, fresh)


def prefill_cache_hit(target: ReferenceEngine, firsts: list[list[int]], new: int) -> Outcome:
    target.flush()
    generate(target, firsts, 0)
    results = generate(target, firsts, new)
    hits = [r.cached_tokens > 0 for r in results]
    target.flush()
    fresh = replay(
        target, [p + list(r.output_ids) for p, r in zip(firsts, results, strict=True)], new
    )
    return _outcome(hits, results, fresh)


def multiturn(target: ReferenceEngine, new: int = 8, groups: int = 3, branches: int = 3) -> Outcome:
    """Groups of branches sharing a prefix, submitted one by one (the 3x3 harness, scaled down)."""
    rng = np.random.default_rng(3)
    target.flush()
    hits, results, fresh = [], [], []
    for _ in range(groups):
        prefix = rng.integers(1, 320, 128).tolist()
        for _ in range(branches):
            prompt = prefix + rng.integers(1, 320, 60).tolist()
            result = generate(target, [prompt], new)[0]
            hits.append(result.cached_tokens > 0)
            results.append(result)
            fresh.extend(replay(target, [prompt + list(result.output_ids)], new))
    return _outcome(hits, results, fresh)


def pressure_restore(target: ReferenceEngine, new: int = 8, prefix_tokens: int = 64) -> Outcome:
    """Two prompts branch from a shared prefix; prompts past the device pool push it out
    (to the host tier, when there is one); a third prompt on the prefix brings it back."""
    rng = np.random.default_rng(5)
    target.flush()
    prefix = rng.integers(1, 320, prefix_tokens).tolist()
    generate(target, [prefix + rng.integers(1, 320, 40).tolist() for _ in range(2)], new)
    pool = target.config.max_total_tokens
    generate(target, [rng.integers(1, 320, pool // 2).tolist() for _ in range(3)], 0)
    probe = prefix + rng.integers(1, 320, 40).tolist()
    result = generate(target, [probe], new)[0]
    fresh = replay(target, [probe + list(result.output_ids)], new)
    return _outcome([result.cached_tokens > 0], [result], fresh)
