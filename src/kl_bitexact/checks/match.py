"""`match`: decode logprobs vs a fresh prefill replay, no cache involved.

Phases: flush, generate, flush, replay (sglang's input_output_logprobs_match).
"""

from __future__ import annotations

from kl_bitexact.checks import prompts, scoring
from kl_bitexact.engines.base import Engine
from kl_bitexact.results import TestResult
from kl_bitexact.suite import TestSpec


def run(engine: Engine, spec: TestSpec, test_id: str | None = None) -> TestResult:
    context = scoring.begin(engine, spec, test_id)
    batch = prompts.single_turn(spec, context.info)
    engine.flush()
    generations = engine.generate(batch, scoring.sampling(spec))
    samples = scoring.replay_and_pair(engine, batch, generations, range(len(batch)))
    return scoring.judge(context, scoring.Measured(samples=samples))
