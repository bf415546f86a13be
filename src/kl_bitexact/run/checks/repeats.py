"""The flake meter: one test run several times, its repeats compared with each other (pure).

A bit-exact check compares decode with replay inside one run; that cannot tell a test
whose answers move from run to run (a reduction whose order follows load or timing) from
one that is stable but wrong. Repeats on the same launch (and optionally across launches)
answer that: every decoded position of every sample is compared with the first repeat's,
bit for bit (output token, decode logprob, replay logprob), and so are cache hits and each
repeat's verdict. Disagreement makes the test `flaky`, with the evidence kept in
`Repeats`; nothing is retried away (sglang's CI retries a failed KL test once).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from msgspec import structs

from kl_bitexact.results.formats import fmt_kl
from kl_bitexact.results.model import Repeats, Status, TestResult
from kl_bitexact.run.checks.metrics import Sample


@dataclass(frozen=True)
class Attempt:
    """One repeat of a test: its result, the samples it scored, the launch it ran on."""

    result: TestResult
    samples: tuple[Sample, ...] = ()
    launch: int = 1


def fold(attempts: Sequence[Attempt]) -> TestResult:
    """One result for a test's repeats; a single attempt is returned as it is."""
    if len(attempts) == 1:
        return attempts[0].result
    evidence = compare(attempts)
    results = [attempt.result for attempt in attempts]
    errored = next((r for r in results if r.status is Status.ERROR), None)
    if errored is not None:  # a repeat that did not run says nothing about the others
        return structs.replace(errored, repeats=evidence, duration_s=_duration(results))
    if evidence.agree:
        return structs.replace(
            results[0],
            repeats=evidence,
            duration_s=_duration(results),
            message=f"{results[0].message}; {stable_note(evidence, results[0])}",
        )
    return _flaky(results, evidence)


def compare(attempts: Sequence[Attempt]) -> Repeats:
    """Every later repeat against the first: a position counts once however many
    repeats moved it."""
    first = attempts[0]
    seen: set[tuple[int, int]] = set()
    changed: set[tuple[int, int]] = set()
    where = ""
    for number, later in enumerate(attempts[1:], start=2):
        text = _differences(first.samples, later.samples, seen, changed)
        where = where or (f"repeat {number} vs 1: {text}" if text else "")
    results = [attempt.result for attempt in attempts]
    return Repeats(
        count=len(attempts),
        launches=len({attempt.launch for attempt in attempts}),
        positions=len(seen),
        changed=len(changed),
        kl=tuple(r.kl_div for r in results),
        floors=_floors(results),
        cache_hits=tuple(r.cache_hits.hit if r.cache_hits else None for r in results),
        statuses=tuple(r.status for r in results),
        first_change=where or _hits_change(results),
    )


def _floors(results: Sequence[TestResult]) -> tuple[float | None, ...]:
    """Each repeat's noise floor, for the checks that measure one (none for `match`)."""
    if all(r.noise_floor is None for r in results):
        return ()
    return tuple(r.noise_floor.kl if r.noise_floor else None for r in results)


def _differences(
    first: Sequence[Sample],
    later: Sequence[Sample],
    seen: set[tuple[int, int]],
    changed: set[tuple[int, int]],
) -> str:
    """Add the (sample, token) positions both repeats scored to `seen`, those that
    differ in any bit to `changed`; the first difference in words."""
    by_index = {sample.index: sample for sample in later}
    where = ""
    for a in first:
        b = by_index.get(a.index)
        if b is None:
            continue
        for token, (x, y) in enumerate(_positions(a, b)):
            seen.add((a.index, token))
            if x != y:
                changed.add((a.index, token))
                where = where or _describe(a.index, token, x, y)
    return where


Position = tuple[int | None, float | None, float | None]


def _positions(a: Sample, b: Sample) -> list[tuple[Position, Position]]:
    """Per decoded token (over the longer of the two): (token id, decode lp, replay lp)."""
    length = max(len(a.decode), len(b.decode))
    return [(_at(a, t), _at(b, t)) for t in range(length)]


def _at(sample: Sample, token: int) -> Position:
    def get(values: Sequence[float | None] | Sequence[int]) -> float | int | None:
        return values[token] if token < len(values) else None

    return (get(sample.output_ids), get(sample.decode), get(sample.replay))  # type: ignore[return-value]


def _describe(sample: int, token: int, a: Position, b: Position) -> str:
    if a[0] != b[0]:
        return f"sample {sample}, token {token}: decoded token {a[0]} vs {b[0]}"
    if a[1] != b[1]:
        return f"sample {sample}, token {token}: decode logprob {a[1]!r} vs {b[1]!r}"
    return f"sample {sample}, token {token}: replay logprob {a[2]!r} vs {b[2]!r}"


def _hits_change(results: Sequence[TestResult]) -> str:
    hits = [r.cache_hits.hit if r.cache_hits else None for r in results]
    if len(set(hits)) > 1:
        return "cache hits differ: " + ", ".join("-" if h is None else str(h) for h in hits)
    statuses = [r.status.value for r in results]
    return "verdicts differ: " + ", ".join(statuses) if len(set(statuses)) > 1 else ""


def _flaky(results: Sequence[TestResult], evidence: Repeats) -> TestResult:
    """The worst repeat's numbers (largest KL, most differing logprobs, fewest hits)."""
    worst = max(results, key=_badness)
    return structs.replace(
        worst,
        status=Status.FLAKY,
        repeats=evidence,
        duration_s=_duration(results),
        message=flaky_message(evidence),
    )


def _badness(result: TestResult) -> tuple[float, int, int]:
    kl = result.kl_div if result.kl_div is not None else -1.0
    mismatched = result.exact.mismatched if result.exact else 0
    hits = -result.cache_hits.hit if result.cache_hits else 0
    return (kl, mismatched, hits)


def flaky_message(evidence: Repeats) -> str:
    on = "one launch" if evidence.launches == 1 else f"{evidence.launches} launches"
    parts = [
        f"flaky: {evidence.count} repeats on {on} disagree",
        f"{evidence.changed} changed positions (of {evidence.positions} compared)",
        f"KL {kl_spread(evidence)}",
    ]
    if any(h is not None for h in evidence.cache_hits):
        parts.append("cache hits " + ", ".join(_hit(h) for h in evidence.cache_hits))
    if len(set(evidence.statuses)) > 1:
        parts.append("verdicts " + ", ".join(s.value for s in evidence.statuses))
    if evidence.first_change:
        parts.append(f"first: {evidence.first_change}")
    return "; ".join(parts)


def stable_note(evidence: Repeats, result: TestResult) -> str:
    """What an agreeing run of repeats says: repeat-stable, and replay-stable or not."""
    on = "one launch" if evidence.launches == 1 else f"{evidence.launches} launches"
    text = f"{evidence.count} repeats on {on} bit-identical ({evidence.positions} positions)"
    if result.exact is not None and result.exact.mismatched:
        text += (
            f"; repeat-stable while replay-unstable ({result.exact.mismatched}/"
            f"{result.exact.tokens} logprobs differ from the replay in every repeat)"
        )
    return text


def kl_spread(evidence: Repeats) -> str:
    values = [kl for kl in evidence.kl if kl is not None]
    if not values:
        return "-"
    low, high = min(values), max(values)
    return fmt_kl(low) if low == high else f"{fmt_kl(low)} .. {fmt_kl(high)}"


def _hit(value: int | None) -> str:
    return "-" if value is None else str(value)


def _duration(results: Sequence[TestResult]) -> float:
    return sum(result.duration_s for result in results)
