"""`multiturn`: groups x branches sharing a prefix, several turns, per-hit assertions.

Phases (after sglang's kl_multiturn_utils): flush; seed the cache with each group's
prefix; turn 1 generates prefix + suffix for every branch, one wave per branch index
(cached_tokens must equal the prefix, page-aligned); each later turn extends
history + output + a fresh suffix, sent in interleaved order (g0b0, g1b0, ..., g0b1, ...)
to stress the radix tree, and its cached_tokens must cover the previous turn; the last
turn is replayed and scored, and its noise floor measured (each sample's last turn generated
cold and alone, against that replay). `cache_assert: mamba` uses the checkpoint rules of hybrid
models instead of exact ones. `flow: sglang` sends sglang's own request sequence instead
(kl_multiturn_utils: one seed request per sample, turn 1 as one batch; branches in run()).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from kl_bitexact.results.model import CacheHits, TestResult
from kl_bitexact.run.checks import prompts, scoring
from kl_bitexact.run.checks.metrics import Geometry, Sample
from kl_bitexact.run.checks.phases import Phases
from kl_bitexact.run.checks.scoring import sampling
from kl_bitexact.run.engines.base import Engine, Generation, SamplingParams
from kl_bitexact.suite.model import CacheAssert, Flow, TestSpec

Prompt = prompts.Prompt
# (lowest, highest) acceptable cached_tokens; highest None: no upper bound.
Expectation = tuple[int, int | None]


def run(phases: Phases, spec: TestSpec, test_id: str | None = None) -> TestResult:
    engine = phases.engine
    context = scoring.begin(engine, spec, test_id)
    if not context.geometry.radix_cache:
        return scoring.not_run(context, scoring.RADIX_DISABLED)
    count = sample_count(spec)
    prefixes, suffixes = conversation(spec, prompts.vocab_size(spec, context.info))
    current = [prefixes[i // spec.branches] + suffixes[0][i] for i in range(count)]
    engine.flush()
    if spec.flow == Flow.SGLANG:
        # sglang seeds one prefix per sample and sends turn 1 as one batch.
        engine.generate([prefixes[i // spec.branches] for i in range(count)], sampling(spec, 0))
        generations = engine.generate(current, sampling(spec))
    else:
        engine.generate(prefixes, sampling(spec, max_new_tokens=0))
        generations = in_waves(engine, current, sampling(spec), spec.groups, spec.branches)
    if scoring.unreported(generations):
        return scoring.not_run(context, scoring.NO_CACHED_TOKENS)
    expected = prefill_expectation(len(prefixes[0]), context.geometry, spec.cache_assert)
    found = violations(generations, [expected] * count, turn=1)
    for turn, turn_suffixes in enumerate(suffixes[1:], start=2):
        current, generations, later = next_turn(
            engine, context, current, generations, turn_suffixes, turn
        )
        found += later
    missed = {violation.sample for violation in found}
    hits = CacheHits(count - len(missed), count, spec.min_cache_hit_ratio, count)
    samples = replayed(phases, spec, current, generations)
    measured = scoring.Measured(
        samples=samples,
        # Branches share prefixes: each generated alone, so none is served from another.
        floor=scoring.no_cache_floor(phases, current, sampling(spec), samples, alone=True),
        hits=hits,
        hit_label="multiturn",
        problems=tuple(str(violation) for violation in found),
    )
    return scoring.judge(context, measured)


def replayed(
    phases: Phases, spec: TestSpec, current: Sequence[Prompt], generations: Sequence[Generation]
) -> tuple[Sample, ...]:
    """The last turn replayed: together, or as sglang does, one sample per flushed replay
    (on a server whose arithmetic depends on the batch, only that gives sglang's bits)."""
    if spec.flow != Flow.SGLANG:
        return scoring.replay_and_pair(phases, current, generations, range(len(current)))
    return tuple(
        sample
        for index in range(len(current))
        for sample in scoring.replay_and_pair(phases, current, generations, [index])
    )


def next_turn(
    engine: Engine,
    context: scoring.Context,
    history: Sequence[Prompt],
    previous: Sequence[Generation],
    suffixes: Sequence[Prompt],
    turn: int,
) -> tuple[list[Prompt], list[Generation], list[Violation]]:
    """history + output + suffix for every sample, sent interleaved; each must reuse
    what the previous turn left in the cache."""
    spec, geometry = context.spec, context.geometry
    expected = [
        decode_expectation(len(h), len(g.output_ids), geometry, spec.cache_assert)
        for h, g in zip(history, previous, strict=True)
    ]
    current = [h + g.output_ids + s for h, g, s in zip(history, previous, suffixes, strict=True)]
    order = interleaved(spec.groups, spec.branches)
    generations = generate_in_order(engine, current, sampling(spec), order)
    return current, generations, violations(generations, expected, turn)


def sample_count(spec: TestSpec) -> int:
    """groups x branches, whatever `spec.samples` says (a spec built in code keeps the
    single-turn default there; only the suite parser fills it)."""
    return spec.groups * spec.branches


def conversation(spec: TestSpec, vocab: int) -> tuple[list[Prompt], list[list[Prompt]]]:
    """One prefix per group; per turn, one suffix per sample (seeded)."""
    rng = np.random.default_rng(spec.seed)
    prefixes = [prompts.token_ids(rng, spec.prefix_tokens, vocab) for _ in range(spec.groups)]
    suffixes = [
        [prompts.token_ids(rng, length, vocab) for _ in range(sample_count(spec))]
        for length in spec.turn_suffix_tokens
    ]
    return prefixes, suffixes


def interleaved(groups: int, branches: int) -> list[int]:
    return [g * branches + b for b in range(branches) for g in range(groups)]


def in_waves(
    engine: Engine, batch: Sequence[Prompt], params: SamplingParams, groups: int, branches: int
) -> list[Generation]:
    """Turn 1, one wave per branch index (every group's branch b together): later
    branches meet earlier ones in the tree and must resume at the branch point, where
    a state borrowed from a sibling would go unnoticed by a single batch."""
    by_sample: dict[int, Generation] = {}
    for branch in range(branches):
        wave = [g * branches + branch for g in range(groups)]
        by_sample.update(zip(wave, engine.generate([batch[i] for i in wave], params), strict=True))
    return [by_sample[i] for i in range(len(batch))]


def generate_in_order(
    engine: Engine, batch: Sequence[Prompt], params: SamplingParams, order: Sequence[int]
) -> list[Generation]:
    answers = engine.generate([batch[i] for i in order], params)
    by_sample: dict[int, Generation] = dict(zip(order, answers, strict=True))
    return [by_sample[i] for i in range(len(batch))]


def prefill_expectation(prefix_len: int, geometry: Geometry, mode: CacheAssert) -> Expectation:
    return RULES[mode].prefill(prefix_len, geometry)


def decode_expectation(
    history: int, output: int, geometry: Geometry, mode: CacheAssert
) -> Expectation:
    return RULES[mode].decode(history, output, geometry)


def _exact_prefill(prefix_len: int, geometry: Geometry) -> Expectation:
    aligned = prefix_len // geometry.page_size * geometry.page_size
    return (aligned, aligned)


def _mamba_prefill(prefix_len: int, geometry: Geometry) -> Expectation:
    step = geometry.prefill_step
    upper = prefix_len // step * step
    return (max(0, upper - step), upper)


def _exact_decode(history: int, output: int, geometry: Geometry) -> Expectation:
    # sglang's helper expects history + output; an engine that never feeds back the
    # last sampled token holds one fewer. Both are exact reuse of everything computed.
    page = geometry.page_size
    return ((history + output - 1) // page * page, (history + output) // page * page)


def _mamba_decode(history: int, output: int, geometry: Geometry) -> Expectation:
    step = geometry.resume_step
    return ((history + output - 1) // step * step, None)


@dataclass(frozen=True)
class Rules:
    """What a turn's cached_tokens must be under one `cache_assert`."""

    prefill: Callable[[int, Geometry], Expectation]  # prefix length -> turn 1
    decode: Callable[[int, int, Geometry], Expectation]  # history, output -> a later turn


# One per CacheAssert (tests/run/test_registries.py holds them equal).
RULES: dict[CacheAssert, Rules] = {
    CacheAssert.EXACT: Rules(_exact_prefill, _exact_decode),
    CacheAssert.MAMBA: Rules(_mamba_prefill, _mamba_decode),
}


@dataclass(frozen=True)
class Violation:
    """One sample of one turn whose cached_tokens fell outside its expectation."""

    sample: int
    turn: int
    cached: int
    expected: Expectation

    def __str__(self) -> str:
        low, high = self.expected
        want = f"{low}" if low == high else f">= {low}" if high is None else f"{low}..{high}"
        return (
            f"sample {self.sample}: cached_tokens {self.cached}, expected {want} (turn {self.turn})"
        )


def violations(
    generations: Sequence[Generation], expected: Sequence[Expectation], turn: int
) -> list[Violation]:
    found = []
    for index, (generation, (low, high)) in enumerate(zip(generations, expected, strict=True)):
        cached = generation.cached_tokens or 0
        if cached < low or (high is not None and cached > high):
            found.append(Violation(index, turn, cached, (low, high)))
    return found
