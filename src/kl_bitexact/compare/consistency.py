"""A `passed` status checked against the test's own numbers (pure).

results.json comes from a job that ran PR code, and the gate must not take a status on
trust: a test saying `passed` with a KL over its threshold, differing logprobs in exact
mode, too few cache hits or nothing compared at all contradicts itself. Such a test is
judged by its numbers (the same rules `run` applies, `docs/suites.md` "Verdict"), and the
contradiction is an error that gates, with the reason in the comment.
"""

from __future__ import annotations

import dataclasses

from kl_bitexact.results.aggregate import average, enough_hits
from kl_bitexact.results.formats import fmt_kl
from kl_bitexact.results.model import Status, TestResult


def contradictions(test: TestResult) -> list[str]:
    """What in the test's numbers says it did not pass; empty when they agree."""
    if test.status is not Status.PASSED:
        return []  # a red or unmeasured status is never read as better than it says
    found: list[str] = []
    floor = test.noise_floor
    # gate: noise-floor judges KL by the measured floor, not the threshold or every bit.
    gated = floor is not None and floor.gates
    threshold = None if gated else test.kl_threshold
    floor_failure = floor.failure(test.kl_div) if floor is not None else None
    if floor_failure:
        found.append(floor_failure)
    if threshold is not None and test.kl_div is not None and not test.kl_div < threshold:
        found.append(f"avg KL {fmt_kl(test.kl_div)} is not below its threshold {threshold:g}")
    if threshold is not None and test.kl_per_sample and not found:  # a low avg hiding them
        mean = average(test.kl_per_sample)
        if not mean < threshold:
            found.append(f"the per-sample KLs average {fmt_kl(mean)} >= {threshold:g}")
    exact = test.exact
    if exact is not None:
        if exact.mismatched > exact.tokens:
            found.append(f"{exact.mismatched} differing logprobs of {exact.tokens} compared")
        elif exact.enforced and exact.mismatched and not gated:
            found.append(f"exact mode, yet {exact.mismatched}/{exact.tokens} logprobs differ")
        if exact.tokens == 0:
            found.append("no logprob was compared")
    hits = test.cache_hits
    if hits is not None and not enough_hits(hits.hit, hits.total, hits.min_ratio):
        found.append(
            f"{hits.hit}/{hits.total} cache hits, not more than {hits.min_ratio:g} x {hits.total}"
        )
    return found


def judged_by_numbers(test: TestResult) -> tuple[TestResult, bool]:
    """The test as its numbers have it, and whether its status contradicted them."""
    found = contradictions(test)
    if not found:
        return test, False
    message = "status passed contradicts its own numbers: " + "; ".join(found)
    return dataclasses.replace(test, status=Status.ERROR, message=message), True
