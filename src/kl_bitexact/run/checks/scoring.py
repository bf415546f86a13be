"""The shared last phases of every check: replay, score, and the verdict.

Verdict rules (never vacuous): too few cache hits or a failed cached-token assertion
fails; nothing compared is `not_run`; avg KL >= threshold fails (strict, as sglang);
in exact mode any differing logprob fails.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kl_bitexact.errors import EngineError
from kl_bitexact.results.formats import fmt_kl
from kl_bitexact.results.model import CacheHits, ExactMatch, Status, TestResult
from kl_bitexact.run.checks import metrics
from kl_bitexact.run.checks.metrics import Geometry, Sample
from kl_bitexact.run.checks.phases import Phases
from kl_bitexact.run.engines.base import Engine, Generation, SamplingParams
from kl_bitexact.suite.model import TestSpec

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


def replay_and_pair(
    phases: Phases,
    prompts: Sequence[Sequence[int]],
    generations: Sequence[Generation],
    indices: Sequence[int],
) -> tuple[Sample, ...]:
    """Replay `prompt + output` for the kept samples (cold), pair the logprobs."""
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
    phases.scored = tuple(samples)
    return phases.scored


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
    failures = _failures(spec, measured, kl, exact)
    status = Status.FAILED if failures else Status.PASSED
    if not failures and exact.tokens == 0:
        status, failures = _nothing_compared(exact)
    return TestResult(
        id=context.test_id,
        check=spec.check.value,
        status=status,
        kl_div=kl,
        kl_threshold=spec.kl_threshold,
        kl_per_sample=kl_per_sample if samples else None,
        exact=exact,
        cache_hits=measured.hits,
        first_divergence=tuple(divergences[:MAX_DIVERGENCES]),
        blocked_by=spec.blocked_by,
        duration_s=time.monotonic() - context.started,
        message=_failure_text(failures, exact) or _summary(kl, exact, measured.hits),
        warnings=measured.warnings,
    )


def _reported(sample: Sample) -> tuple[list[float], list[float]]:
    """The decode and replay logprobs of the positions both sides reported."""
    compared = sample.compared()
    return [a for _, a, _ in compared], [b for _, _, b in compared]


def _nothing_compared(exact: ExactMatch) -> tuple[Status, list[str]]:
    """No position compared: not run when no sample was kept, failed when the server
    reported none of the kept ones (the gate cannot vouch for a server that hides them)."""
    if not exact.not_reported:
        return Status.NOT_RUN, ["no logprob was compared (no sample kept)"]
    return Status.FAILED, [
        f"no logprob could be compared: all {exact.not_reported} positions were "
        "not reported by the server"
    ]


def _failures(spec: TestSpec, measured: Measured, kl: float | None, exact: ExactMatch) -> list[str]:
    failures = []
    hits = measured.hits
    if hits is not None and not metrics.enough_hits(hits.hit, hits.total, hits.min_ratio):
        failures.append(
            f"Too few {measured.hit_label} cache hits: {hits.hit}/{hits.total} "
            f"(need more than {hits.min_ratio:g} x {hits.total})"
        )
    if measured.problems:
        shown = "; ".join(measured.problems[:3])
        more = f" (+{len(measured.problems) - 3} more)" if len(measured.problems) > 3 else ""
        failures.append(f"cached_tokens assertion failed: {shown}{more}")
    if kl is not None and not kl < spec.kl_threshold:
        failures.append(f"avg KL {kl:.3e} >= threshold {spec.kl_threshold:g}")
    if spec.exact and exact.mismatched:
        failures.append(f"exact: {exact.mismatched}/{exact.tokens} logprobs differ")
    return failures


def _failure_text(failures: Sequence[str], exact: ExactMatch) -> str:
    text = "; ".join(failures)
    if text and exact.tokens and exact.not_reported:
        text += f"; {_not_reported(exact)}"
    return text


def _not_reported(exact: ExactMatch) -> str:
    return f"{exact.not_reported} not reported by the server"


def _summary(kl: float | None, exact: ExactMatch, hits: CacheHits | None) -> str:
    text = f"avg KL {fmt_kl(kl)}; {exact.mismatched}/{exact.tokens} logprobs differ"
    if exact.not_reported:
        text += f"; {_not_reported(exact)}"
    if hits is not None:
        text += f"; cache hits {hits.hit}/{hits.total}"
    return text
