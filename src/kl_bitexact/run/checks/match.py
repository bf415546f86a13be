"""`match`: decode logprobs vs a fresh prefill replay, no cache involved.

Phases: generate, replay (sglang's input_output_logprobs_match), both cold: they reuse
no cached prefix (on sglang a flush comes before each), and an earlier check's identical
turn-1 generation or replay is reused. A failure says the engine is not batch-invariant
and names its switch (`invariance`).
"""

from __future__ import annotations

from msgspec import structs

from kl_bitexact.results.model import TestResult
from kl_bitexact.run.checks import invariance, prompts, scoring
from kl_bitexact.run.checks.phases import Phases
from kl_bitexact.suite.model import TestSpec


def run(phases: Phases, spec: TestSpec, test_id: str | None = None) -> TestResult:
    context = scoring.begin(phases.engine, spec, test_id)
    batch = prompts.single_turn(spec, context.info)
    generations = phases.cold_outputs(batch, scoring.sampling(spec))
    samples = scoring.replay_and_pair(phases, batch, generations, range(len(batch)))
    result = scoring.judge(context, scoring.Measured(samples=samples))
    # No cache is involved: a failure here is the engine's own, and it has a switch.
    note = invariance.not_invariant(result, context.info)
    return structs.replace(result, warnings=(*result.warnings, note)) if note else result
