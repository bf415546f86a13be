"""The shared last phases of every check: replay, score, and the verdict.

Verdict rules (never vacuous): too few cache hits or a failed cached-token assertion
fails; nothing compared is `not_run`; avg KL >= threshold fails (strict, as sglang);
in exact mode any differing logprob fails.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from kl_bitexact.checks import metrics
from kl_bitexact.checks.metrics import Geometry, Sample
from kl_bitexact.engines.base import Engine, Generation
from kl_bitexact.errors import EngineError
from kl_bitexact.results import CacheHits, ExactMatch, Status, TestResult
from kl_bitexact.suite import TestSpec

# Enough to localise a bug; a run where every sample diverges need not list all 32.
MAX_DIVERGENCES = 8


@dataclass(frozen=True)
class Measured:
    """What a check's phases produced, before the verdict."""

    samples: tuple[Sample, ...]
    hits: CacheHits | None = None
    hit_label: str = ""  # "prefill", "decode": the words of sglang's message
    problems: tuple[str, ...] = ()  # cached-token assertions that did not hold
    warnings: tuple[str, ...] = ()


def replay_and_pair(
    engine: Engine,
    prompts: Sequence[Sequence[int]],
    generations: Sequence[Generation],
    indices: Sequence[int],
) -> tuple[Sample, ...]:
    """Flush, replay `prompt + output` for the kept samples, pair the logprobs."""
    engine.flush()
    sequences = [tuple(prompts[i]) + generations[i].output_ids for i in indices]
    replays = engine.replay(sequences)
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
            )
        )
    return tuple(samples)


def not_run(spec: TestSpec, test_id: str, reason: str, started: float) -> TestResult:
    return TestResult(
        id=test_id,
        check=spec.check,
        status=Status.NOT_RUN,
        kl_threshold=spec.kl_threshold,
        blocked_by=spec.blocked_by,
        duration_s=time.monotonic() - started,
        message=reason,
    )


def judge(
    spec: TestSpec, test_id: str, measured: Measured, geometry: Geometry, started: float
) -> TestResult:
    samples = measured.samples
    kl_per_sample = tuple(metrics.k3(s.decode, s.replay) for s in samples)
    kl = metrics.average(kl_per_sample) if samples else None
    exact = ExactMatch(
        tokens=sum(len(s.decode) for s in samples),
        mismatched=sum(metrics.mismatched(s.decode, s.replay) for s in samples),
    )
    divergences = [d for s in samples if (d := metrics.first_divergence(s, geometry))]
    failures = _failures(spec, measured, kl, exact)
    status = Status.FAILED if failures else Status.PASSED
    if not failures and exact.tokens == 0:
        status, failures = Status.NOT_RUN, ["no logprob was compared (no sample kept)"]
    return TestResult(
        id=test_id,
        check=spec.check,
        status=status,
        kl_div=kl,
        kl_threshold=spec.kl_threshold,
        kl_per_sample=kl_per_sample,
        exact=exact,
        cache_hits=measured.hits,
        first_divergence=tuple(divergences[:MAX_DIVERGENCES]),
        blocked_by=spec.blocked_by,
        duration_s=time.monotonic() - started,
        message="; ".join(failures) or _summary(kl, exact, measured.hits),
        warnings=measured.warnings,
    )


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


def _summary(kl: float | None, exact: ExactMatch, hits: CacheHits | None) -> str:
    text = f"avg KL {kl:.3e}; {exact.mismatched}/{exact.tokens} logprobs differ"
    if hits is not None:
        text += f"; cache hits {hits.hit}/{hits.total}"
    return text
