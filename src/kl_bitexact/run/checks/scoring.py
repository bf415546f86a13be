"""The shared last phases of every check: replay, score, and the verdict.

The verdict is `results.verdict`'s, the one rule report and publish apply again to the
recorded numbers (never vacuous): too few cache hits or a failed cached-token assertion
fails; avg KL >= threshold fails (strict, as sglang); in exact mode any differing logprob
fails; under `gate: noise-floor` a cache check's KL is judged by its measured noise floor
instead of the threshold and the exact rule (`NoiseFloor.failure`). Nothing compared is
`not_run` here (the check knows why: no sample kept).

The noise floor of a cache check is the `match` check of the same prompts: they are
generated again with no cache (a cold phase, so a later `match` of the same prompts reuses
it) and scored against the same replay. A second replay of another batch or chunk shape
would measure how replays differ among themselves; the question is how far a decode drifts
from its replay when no cache is involved, which only a cold decode answers, on the very
shapes (prompt lengths, output lengths, sampling) the cache test used.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from msgspec import structs

from kl_bitexact.errors import EngineError
from kl_bitexact.results import verdict
from kl_bitexact.results.formats import fmt_kl
from kl_bitexact.results.model import (
    CacheHits,
    Concurrency,
    ExactMatch,
    NoiseFloor,
    Status,
    TestResult,
)
from kl_bitexact.run.checks import metrics
from kl_bitexact.run.checks.metrics import Geometry, Sample
from kl_bitexact.run.checks.phases import Phases
from kl_bitexact.run.engines.base import Engine, Generation, SamplingParams
from kl_bitexact.suite.model import Gate, TestSpec

# Enough to localise a bug; a run where every sample diverges need not list all 32.
MAX_DIVERGENCES = 8
RADIX_DISABLED = "radix cache disabled on the server (disable_radix_cache); nothing to hit"
NO_CACHED_TOKENS = "the server does not report cached_tokens, so hits cannot be counted"


@dataclass(frozen=True)
class Context:
    """What a check knows before its first phase."""

    spec: TestSpec
    test_id: str
    info: Mapping[str, Any]
    geometry: Geometry
    started: float


def begin(engine: Engine, spec: TestSpec, test_id: str | None) -> Context:
    started = time.monotonic()
    info = engine.server_info()
    return Context(spec, test_id or spec.name, info, Geometry.from_server_info(info), started)


def sampling(spec: TestSpec, max_new_tokens: int | None = None) -> SamplingParams:
    """The suite's sampling settings (`max_new_tokens=0`: a warm-up that only fills)."""
    return SamplingParams(
        max_new_tokens=spec.max_new_tokens if max_new_tokens is None else max_new_tokens,
        temperature=spec.temperature,
        seed=spec.seed,
    )


def unreported(generations: Sequence[Generation]) -> bool:
    """True when the server does not say how many tokens it reused."""
    return any(g.cached_tokens is None for g in generations)


def geometry_warnings(context: Context, expected: int, total: int) -> tuple[str, ...]:
    ratio = context.spec.min_cache_hit_ratio
    text = metrics.geometry_warning(expected, total, ratio, context.geometry)
    slots = metrics.slot_warning(total, context.geometry)
    return tuple(warning for warning in (text, slots) if warning)


def predicted_hits(context: Context, expected: int, total: int) -> int | None:
    """The hits the geometry allows, unknown when the samples outnumber the slots."""
    return metrics.slot_bound(expected, total, context.geometry)


def budget_warnings(context: Context, held: int) -> tuple[str, ...]:
    text = metrics.eviction_warning(held, context.geometry)
    return (text,) if text else ()


@dataclass(frozen=True)
class Measured:
    """What a check's phases produced, before the verdict."""

    samples: tuple[Sample, ...]
    hits: CacheHits | None = None
    hit_label: str = ""  # "prefill", "decode", "multiturn": in "Too few ... cache hits"
    problems: tuple[str, ...] = ()  # cached-token assertions that did not hold
    warnings: tuple[str, ...] = ()
    # Cache checks: the same samples generated with no cache (`no_cache_floor`).
    floor: tuple[Sample, ...] | None = None
    # concurrent_prefix_hit: each round of requests sent at once, as observed.
    concurrency: Concurrency | None = None


def replay_and_pair(
    phases: Phases,
    prompts: Sequence[Sequence[int]],
    generations: Sequence[Generation],
    indices: Sequence[int],
) -> tuple[Sample, ...]:
    """Replay `prompt + output` for the kept samples (cold), pair the logprobs; these are
    the samples the check scores (the flake meter compares them between repeats)."""
    phases.scored = _paired(phases, prompts, generations, indices)
    return phases.scored


def no_cache_floor(
    phases: Phases,
    prompts: Sequence[Sequence[int]],
    params: SamplingParams,
    scored: Sequence[Sample],
    *,
    alone: bool = False,
) -> tuple[Sample, ...]:
    """The noise floor of a cache check: its scored samples' prompts generated with no
    cache, paired with the replay. A sample whose cold output is the cached one's reuses
    that replay; only samples whose output changed are replayed again. `alone`: each
    prompt in a cold request of its own, for prompts that share a prefix (multiturn): an
    engine that flushes before a cold batch could still serve one prompt's prefix from
    another's in the same batch, and the floor would then hold the cache it is to judge."""
    if alone:
        cold = [phases.cold_outputs([prompt], params)[0] for prompt in prompts]
    else:
        cold = phases.cold_outputs(prompts, params)
    changed = [s.index for s in scored if cold[s.index].output_ids != s.output_ids]
    fresh = {s.index: s for s in _paired(phases, prompts, cold, changed)} if changed else {}
    return tuple(
        fresh.get(s.index)
        or dataclasses.replace(
            s, decode=cold[s.index].output_logprobs, cached_tokens=cold[s.index].cached_tokens
        )
        for s in scored
    )


def _paired(
    phases: Phases,
    prompts: Sequence[Sequence[int]],
    generations: Sequence[Generation],
    indices: Sequence[int],
) -> tuple[Sample, ...]:
    sequences = [tuple(prompts[i]) + generations[i].output_ids for i in indices]
    # Only the decoded tokens' logprobs are compared: spare the engine the prompt's.
    needed = max((len(generations[i].output_logprobs) for i in indices), default=0)
    replays = phases.replay_cold(sequences, last=needed)
    samples = []
    for i, sequence, replay in zip(indices, sequences, replays, strict=True):
        if len(replay.input_logprobs) != len(sequence):
            raise EngineError(
                f"replay of sample {i}: {len(replay.input_logprobs)} input logprobs "
                f"for {len(sequence)} tokens (is logprob_start_len honoured?)"
            )
        decoded = generations[i].output_logprobs
        samples.append(
            Sample(
                index=i,
                prompt_len=len(prompts[i]),
                cached_tokens=generations[i].cached_tokens,
                decode=decoded,
                replay=replay.last(len(decoded)),
                output_ids=tuple(generations[i].output_ids),
            )
        )
    return tuple(samples)


def not_run(context: Context, reason: str) -> TestResult:
    spec = context.spec
    return TestResult(
        id=context.test_id,
        check=spec.check.value,
        status=Status.NOT_RUN,
        kl_threshold=spec.kl_threshold,
        blocked_by=spec.blocked_by,
        duration_s=time.monotonic() - context.started,
        message=reason,
    )


def judge(context: Context, measured: Measured) -> TestResult:
    spec, samples = context.spec, measured.samples
    pairs = [_reported(sample) for sample in samples]
    # A sample none of whose positions the server reported has no KL (not a KL of 0).
    pairs = [(decode, replay) for decode, replay in pairs if decode]
    kl_per_sample = tuple(metrics.k3(decode, replay) for decode, replay in pairs)
    kl = metrics.average(kl_per_sample) if pairs else None
    exact = ExactMatch(
        tokens=sum(len(decode) for decode, _ in pairs),
        mismatched=sum(metrics.mismatched(decode, replay) for decode, replay in pairs),
        not_reported=sum(s.not_reported for s in samples),
        enforced=spec.exact,
    )
    divergences = [d for s in samples if (d := metrics.first_divergence(s, context.geometry))]
    floor = _noise_floor(spec, kl, measured.floor)
    measured_result = TestResult(
        id=context.test_id,
        check=spec.check.value,
        status=Status.PASSED,  # a claim: the one verdict rule below decides
        kl_div=kl,
        kl_threshold=spec.kl_threshold,
        kl_per_sample=kl_per_sample if samples else None,
        exact=exact,
        cache_hits=measured.hits,
        first_divergence=tuple(divergences[:MAX_DIVERGENCES]),
        blocked_by=spec.blocked_by,
        duration_s=time.monotonic() - context.started,
        warnings=measured.warnings,
        max_abs_diff=_largest_difference(pairs),
        noise_floor=floor,
        concurrency=measured.concurrency,
    )
    problems = _assertions(measured.problems)
    if exact.tokens == 0:  # too few hits still fail; else nothing was measured
        failures: Sequence[str] = verdict.red(measured_result, measured.hit_label) + problems
        status = Status.FAILED
        if not failures:
            status, failures = _nothing_compared(exact)
    else:
        status, failures = verdict.judge(
            measured_result, planned=True, problems=problems, hit_label=measured.hit_label
        )
    message = _failure_text(failures, exact) or _summary(kl, exact, measured.hits, floor)
    return structs.replace(measured_result, status=status, message=message)


def _assertions(problems: Sequence[str]) -> list[str]:
    """Cached-token assertions that did not hold: no recorded number says so."""
    if not problems:
        return []
    shown = "; ".join(problems[:3])
    more = f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""
    return [f"cached_tokens assertion failed: {shown}{more}"]


def _largest_difference(pairs: Sequence[tuple[Sequence[float], Sequence[float]]]) -> float | None:
    """The largest |decode - replay| over the compared positions."""
    if not any(decode for decode, _ in pairs):
        return None
    differences = (
        abs(a - b) for decode, replay in pairs for a, b in zip(decode, replay, strict=True)
    )
    # NaN (both sides -inf) is no difference; inf (one side) saturates as the KL does.
    largest = max((d for d in differences if d == d), default=0.0)
    return min(largest, metrics.KL_INFINITE)


def _noise_floor(
    spec: TestSpec, kl: float | None, floor: tuple[Sample, ...] | None
) -> NoiseFloor | None:
    """The floor's numbers beside the cache test's own, with the gate's terms when the
    test is judged by it (`gate: noise-floor`)."""
    if floor is None:
        return None
    pairs = [pair for pair in (_reported(sample) for sample in floor) if pair[0]]
    floor_kl = metrics.average([metrics.k3(a, b) for a, b in pairs]) if pairs else None
    gated = spec.gate is Gate.NOISE_FLOOR
    return NoiseFloor(
        kl=floor_kl,
        tokens=sum(len(decode) for decode, _ in pairs),
        mismatched=sum(metrics.mismatched(decode, replay) for decode, replay in pairs),
        max_abs_diff=_largest_difference(pairs),
        ratio=kl / floor_kl if kl is not None and floor_kl else None,
        factor=spec.floor_factor if gated else None,
        margin=spec.floor_margin if gated else None,
    )


def _reported(sample: Sample) -> tuple[list[float], list[float]]:
    """The decode and replay logprobs of the positions both sides reported."""
    compared = sample.compared()
    return [a for _, a, _ in compared], [b for _, _, b in compared]


def _nothing_compared(exact: ExactMatch) -> tuple[Status, Sequence[str]]:
    """No position compared: not run when no sample was kept, failed when the server
    reported none of the kept ones (the gate cannot vouch for a server that hides them)."""
    if not exact.not_reported:
        return Status.NOT_RUN, ["no logprob was compared (no sample kept)"]
    return Status.FAILED, [
        f"no logprob could be compared: all {exact.not_reported} positions were "
        "not reported by the server"
    ]


def _failure_text(failures: Sequence[str], exact: ExactMatch) -> str:
    text = "; ".join(failures)
    if text and exact.tokens and exact.not_reported:
        text += f"; {_not_reported(exact)}"
    return text


def _not_reported(exact: ExactMatch) -> str:
    return f"{exact.not_reported} not reported by the server"


def _summary(
    kl: float | None, exact: ExactMatch, hits: CacheHits | None, floor: NoiseFloor | None
) -> str:
    text = f"avg KL {fmt_kl(kl)}; {exact.mismatched}/{exact.tokens} logprobs differ"
    if exact.not_reported:
        text += f"; {_not_reported(exact)}"
    if hits is not None:
        text += f"; cache hits {hits.hit}/{hits.total}"
    if floor is not None:
        text += f"; noise floor {fmt_kl(floor.kl)}"
        if floor.ratio is not None:
            text += f" ({floor.ratio:.3g}x)"
        if floor.gates:
            text += f", within {floor.factor:g}x + {floor.margin:g}"
    return text
