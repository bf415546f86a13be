"""`match`: decode logprobs vs a fresh prefill replay, no cache involved.

Phases: flush, generate, flush, replay (sglang's input_output_logprobs_match).
"""

from __future__ import annotations

import time

from kl_bitexact.checks import prompts, scoring
from kl_bitexact.checks.metrics import Geometry
from kl_bitexact.engines.base import Engine, SamplingParams
from kl_bitexact.results import TestResult
from kl_bitexact.suite import TestSpec


def run(engine: Engine, spec: TestSpec, test_id: str | None = None) -> TestResult:
    started = time.monotonic()
    info = engine.server_info()
    batch = prompts.single_turn(spec, info)
    engine.flush()
    generations = engine.generate(batch, sampling(spec))
    samples = scoring.replay_and_pair(engine, batch, generations, range(len(batch)))
    measured = scoring.Measured(samples=samples)
    return scoring.judge(
        spec, test_id or spec.name, measured, Geometry.from_server_info(info), started
    )


def sampling(spec: TestSpec, max_new_tokens: int | None = None) -> SamplingParams:
    """The suite's sampling settings (shared by every check)."""
    return SamplingParams(
        max_new_tokens=spec.max_new_tokens if max_new_tokens is None else max_new_tokens,
        temperature=spec.temperature,
        seed=spec.seed,
    )
