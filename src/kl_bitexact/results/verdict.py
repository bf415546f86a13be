"""What a test's recorded numbers say: the one rule every command judges a test by (pure).

`run` (the checks' verdict), `report`, `publish` and the action (a `passed` status checked
against its own numbers) and the pytest plugin (a hand-recorded measurement) all call
`judge`; none of them writes the rule again, so they cannot disagree (issue 27). A pass is a
proof (issue 30): a `passed` test keeps its status only when

- nothing in its numbers says red: avg KL (and the per-sample mean) strictly below the
  threshold (sglang's `<`), no differing logprob in exact mode, enough cache hits; under
  `gate: noise-floor` the KL within the measured floor's bound instead of the threshold and
  the exact rule (`NoiseFloor.failure`, the floor's own statement of it);
- its numbers are possible: KL >= 0 within rounding (`KL_ROUNDING`), each per-sample KL too,
  their mean equal to the avg KL, no more hits than samples, no more differing logprobs than
  compared ones, at least one logprob compared (in exact mode, more compared than withheld);
- and a KL check (one of `run`'s checks, by whatever made the result) recorded what it is
  judged by: the threshold and the avg KL, and the cache hits for the cache checks - planned
  or not (issue 36: a `decode_cache_hit` pass with every number null was "ok"); a test
  `run` planned also the per-sample KLs and the logprobs compared.

A test whose check is not a KL check (a plain pytest test) is judged by what it recorded;
when it recorded nothing its pass is its own assertions', shown as "passed - not a KL
check" (`not_a_kl_check`), never as a KL pass with empty columns.

Before any number, the test must have tested what it claims (issue 35): a fact it states
about its server that the server did not confirm (`TestResult.facts`: another value, or
none reported) makes it `not_exercised`, whether its numbers passed or failed - they are
not about the path it guards, so they are neither a pass nor a regression of it
(`unexercised`, the one rule; a named function that never ran joins it there, and a
`concurrent_prefix_hit` none of whose rounds reached the shape it asserts).
Numpy-free, beside `aggregate`, so that report and publish never import the checks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from msgspec import structs

from kl_bitexact.results.aggregate import KL_ROUNDING, average, enough_hits
from kl_bitexact.results.formats import fmt_kl
from kl_bitexact.results.model import Reach, Status, TestResult

# The checks `run` has (suite.model.CheckName: tests/results/test_verdict.py holds them equal;
# `results` may not import `suite`), and those that count cache hits.
HIT_CHECKS = frozenset(
    {
        "prefill_cache_hit",
        "decode_cache_hit",
        "multiturn",
        "pressure_restore",
        "abandoned_prefix_reuse",
        "concurrent_prefix_hit",
    }
)
# The check whose requests are sent at once and which records each round it observed.
CONCURRENT_CHECK = "concurrent_prefix_hit"
RUN_CHECKS = HIT_CHECKS | {"match"}
# The avg KL is the plain mean of the per-sample KLs; printed values (sglang's logs) may have
# been averaged in another order, so they agree to this relative difference.
MEAN_TOLERANCE = 1e-6


class Judgement(NamedTuple):
    """A test's status as its numbers have it, and why when that is not what it said."""

    status: Status
    reasons: tuple[str, ...] = ()


def red(test: TestResult, hit_label: str = "") -> list[str]:
    """What in the numbers says the test failed (empty: nothing does), in sglang's words
    where it has some ("Too few decode cache hits: 16/32"; `hit_label`: "decode")."""
    found = [_kl_failure(test), _exact_failure(test), _hits_failure(test, hit_label)]
    return [reason for reason in found if reason]


def failing(test: TestResult) -> frozenset[str]:
    """Which of its measures fail their rule: `kl`, `exact`, `hits` (the gate's "worse than
    its red base" compares only those)."""
    checks = {"kl": _kl_failure, "exact": _exact_failure, "hits": _hits_failure}
    return frozenset(name for name, check in checks.items() if check(test))


def kl_unjudged(test: TestResult) -> bool:
    """An avg KL with no rule to judge it by: no threshold and no floor that gates. Whether
    it fails cannot be told, so what asks "does it fail?" to excuse it must read yes."""
    return test.kl_div is not None and test.kl_threshold is None and not _gated(test)


def _gated(test: TestResult) -> bool:
    # gate: noise-floor judges KL by the measured floor, not the threshold or every bit.
    return test.noise_floor is not None and test.noise_floor.gates


def _kl_failure(test: TestResult) -> str | None:
    floor = test.noise_floor
    if floor is not None and (beyond := floor.failure(test.kl_div)):
        return beyond
    threshold = None if _gated(test) else test.kl_threshold
    if threshold is None:
        return None
    if test.kl_div is not None and not test.kl_div < threshold:
        return f"avg KL {test.kl_div:.3e} >= threshold {threshold:g}"
    if test.kl_per_sample and not average(test.kl_per_sample) < threshold:
        # a low avg hiding them
        return f"the per-sample KLs average {fmt_kl(average(test.kl_per_sample))} >= {threshold:g}"
    return None


def _exact_failure(test: TestResult, _: str = "") -> str | None:
    exact = test.exact
    if exact is None or not exact.enforced or _gated(test):
        return None
    if 0 < exact.mismatched <= exact.tokens:
        return f"exact: {exact.mismatched}/{exact.tokens} logprobs differ"
    return None


def _hits_failure(test: TestResult, hit_label: str = "") -> str | None:
    hits = test.cache_hits
    if hits is None or hits.hit > hits.total or enough_hits(hits.hit, hits.total, hits.min_ratio):
        return None
    label = f"{hit_label} " if hit_label else ""
    return (
        f"Too few {label}cache hits: {hits.hit}/{hits.total} "
        f"(need more than {hits.min_ratio:g} x {hits.total})"
    )


def impossible(test: TestResult) -> list[str]:
    """Numbers no measurement can produce."""
    found: list[str] = []
    if test.kl_div is not None and test.kl_div < -KL_ROUNDING:
        found.append(f"avg KL {test.kl_div!r} is below 0 (a KL cannot be negative)")
    per_sample = test.kl_per_sample or ()
    negative = [value for value in per_sample if value < -KL_ROUNDING]
    if negative:
        found.append(f"{len(negative)} per-sample KL below 0 (e.g. {negative[0]!r})")
    elif per_sample and test.kl_div is not None and not _same(average(per_sample), test.kl_div):
        found.append(
            f"the per-sample KLs average {fmt_kl(average(per_sample))}, "
            f"not the avg KL {fmt_kl(test.kl_div)}"
        )
    exact = test.exact
    if exact is not None and exact.mismatched > exact.tokens:
        found.append(f"{exact.mismatched} differing logprobs of {exact.tokens} compared")
    hits = test.cache_hits
    if hits is not None and hits.hit > hits.total:
        found.append(f"{hits.hit} cache hits of {hits.total} samples")
    if hits is not None and hits.expected is not None and hits.expected > hits.total:
        found.append(f"{hits.expected} hits predicted of {hits.total} samples")
    return found


# How a test skipped because the engine it ran on lacks a path it needs says so (the skip
# reason `not judged on the reference engine: needs X`; the sglang shims of
# docs/sglang-oracle.md raise it): never red and never green for it.
NOT_JUDGED = "not judged on the reference engine"
_NEEDS = f"{NOT_JUDGED}: needs "


def needs(test: TestResult) -> str | None:
    """What a test not judged on the reference engine needs (`a real model (...)`, a flag),
    None for any other test."""
    if test.status is Status.SKIPPED and test.message.startswith(_NEEDS):
        return test.message[len(_NEEDS) :].strip() or None
    return None


def not_a_kl_check(test: TestResult) -> bool:
    """A pass whose check is no KL check and that recorded nothing to judge: a plain test
    (pytest's own assertions passed), "passed - not a KL check"."""
    if test.status is not Status.PASSED or test.check in RUN_CHECKS:
        return False  # asked of every test: most are KL checks, told by their check alone
    recorded = (test.kl_div, test.kl_threshold, test.kl_per_sample, test.exact, test.cache_hits)
    return all(value is None for value in recorded) and test.noise_floor is None


def unproven(test: TestResult, *, planned: bool) -> list[str]:
    """What a pass lacks to prove anything: nothing compared, and for a KL check the numbers
    it is judged by (for a test `run` planned: all that its check measures)."""
    exact = test.exact
    found: list[str] = []
    # `tokens` counts compared positions only: llama.cpp legitimately withholds most
    # positions of a byte-token vocabulary (tokens ending mid-character), so withheld
    # positions outnumbering compared ones proves nothing wrong; none compared does.
    if exact is not None and exact.tokens == 0:
        withheld = f" ({exact.not_reported} not reported by the server)"
        found.append("no logprob was compared" + (withheld if exact.not_reported else ""))
    floor = test.noise_floor
    if floor is not None and floor.factor is not None and floor.kl is None:
        # gate: noise-floor asked for a floor that compared nothing: judged by the threshold
        # instead, a floor of 0 (bit-exact with no cache) would have been stricter.
        found.append("gate noise-floor, but the noise floor compared nothing to judge it by")
    if test.check not in RUN_CHECKS:
        return found  # judged by what it recorded (`not_a_kl_check` when nothing)
    needs: dict[str, object] = {"KL threshold": test.kl_threshold, "avg KL": test.kl_div}
    if planned:
        needs |= {"per-sample KLs": test.kl_per_sample or None, "compared logprobs": exact}
    if test.check in HIT_CHECKS:
        needs["cache hits"] = test.cache_hits
    if test.check == CONCURRENT_CHECK:
        needs["concurrent rounds"] = test.concurrency
    absent = [name for name, value in needs.items() if value is None]
    if absent:
        found.append(f"{test.check} recorded no {', no '.join(absent)}")
    return found


# Statuses that claim something about the path the test guards: its numbers (a pass, a
# failure, repeats that disagree). The others measured nothing and say so themselves.
CLAIMS = frozenset({Status.PASSED, Status.FAILED, Status.FLAKY})


def unexercised(test: TestResult) -> list[str]:
    """Why the test did not exercise what it claims (empty: nothing says so): each fact it
    states that its server did not confirm, in words ("enable_hierarchical_cache: expected
    true, the server reported false (GET /server_info)"), and each function it names
    (`reach`) that never ran, or why its reach could not be measured."""
    facts = [fact.failure() for fact in test.facts if not fact.holds]
    return facts + unreached(test.reach) + unconcurrent(test)


def unconcurrent(test: TestResult) -> list[str]:
    """Why a concurrency test did not reach the shape it asserts: none of its rounds did
    (which request the server serves first decides it), so its numbers are not about it."""
    seen = test.concurrency
    if seen is None or seen.reached:
        return []  # None: `unproven` already says it recorded no concurrent rounds
    if not seen.rounds:  # only a file not written by `run` (it runs at least one round)
        return [f"no concurrent round was recorded, so none reached {seen.shape}"]
    return [f"none of {len(seen.rounds)} concurrent round(s) reached {seen.shape}"]


NOT_MEASURED = "reach not measured"


def unreached(reach: Reach | None) -> list[str]:
    """The functions a test names that did not run ("m:f never ran (why)"); one reason when
    nothing could be measured. The PR's changed functions are not the test's claim."""
    if reach is None or not reach.functions:
        return []
    if not reach.measured:
        said = reach.why_not or "no probe reported"
        return [said if said.startswith(NOT_MEASURED) else f"{NOT_MEASURED}: {said}"]
    return [f"{f.name} never ran" + (f" ({f.note})" if f.note else "") for f in reach.unreached]


def judge(
    test: TestResult, *, planned: bool, problems: Sequence[str] = (), hit_label: str = ""
) -> Judgement:
    """The status a test's numbers support. A passed, failed or flaky test whose stated
    facts did not hold is `not_exercised` (`unexercised`). Beyond that only a `passed`
    claim is checked (a red or unmeasured status is never read as better than it says): red
    numbers make it `failed`, impossible or missing ones an `error`. `problems`: failures
    the check saw that no number records (a cached-token assertion that did not hold)."""
    missed = unexercised(test) if test.status in CLAIMS else []
    if missed:
        return Judgement(Status.NOT_EXERCISED, tuple(missed))
    if test.status is not Status.PASSED:
        return Judgement(test.status)
    wrong = impossible(test) + unproven(test, planned=planned)
    if wrong:
        return Judgement(Status.ERROR, tuple(wrong + red(test, hit_label)))
    failures = red(test, hit_label) + list(problems)
    return Judgement(Status.FAILED, tuple(failures)) if failures else _PASSED


_PASSED = Judgement(Status.PASSED)  # a value: one for every test that passes


def judged(test: TestResult, *, planned: bool) -> tuple[TestResult, bool]:
    """The test as its numbers have it, and whether its `passed` claim did not hold. A
    results file comes from a job that ran PR code: a pass its numbers contradict, or that
    proves nothing, is an `error` that gates (never merely `failed`: the file lied)."""
    status, reasons = judge(test, planned=planned)
    if status is test.status:
        return test, False
    if status is Status.NOT_EXERCISED:
        # Not a lie: its recorded facts say it, and the verdict says so without blame.
        return structs.replace(test, status=status, message=not_exercised_message(reasons)), False
    why = (
        "contradicts its own numbers"
        if status is Status.FAILED or impossible(test)
        else ("proves nothing")
    )
    message = f"status passed {why}: " + "; ".join(reasons)
    return structs.replace(test, status=Status.ERROR, message=message), True


REACH_HINT = (
    "configure the server so that the path the test guards runs, or name the function it "
    "does run (the test's `reach`; docs/reach.md)"
)


def exercised(test: TestResult) -> TestResult:
    """The test, `not_exercised` when a function it names did not run (or its reach could
    not be measured) or a fact it states did not hold, whatever its numbers say; as it was
    otherwise. `run` and `kl-bitexact pytest`'s import apply it once reach is known."""
    missed = unexercised(test) if test.status in CLAIMS else []
    if not missed:
        return test
    hint = REACH_HINT if unreached(test.reach) else test.hint
    return structs.replace(
        test, status=Status.NOT_EXERCISED, message=not_exercised_message(missed), hint=hint
    )


def not_exercised_message(reasons: Sequence[str]) -> str:
    """The message of a `not_exercised` test: what the server did not confirm."""
    return "not exercised (the test did not test what it claims): " + "; ".join(reasons)


def _same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=MEAN_TOLERANCE, abs_tol=KL_ROUNDING)
