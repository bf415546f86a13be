"""Sentences about a test's numbers every rendering shares (pure); a test's state in words:
compare/states.py; numbers: results.formats."""

from __future__ import annotations

from kl_bitexact.results.formats import fmt_kl
from kl_bitexact.results.model import Status, TestResult


def measured(test: TestResult) -> str:
    """What a red test measured, in words: its KL and how many logprobs differ."""
    text = f"measured {fmt_kl(test.kl_div)}"
    if test.exact is not None and test.exact.mismatched:
        text += f", {test.exact.mismatched}/{test.exact.tokens} logprobs differ"
    if test.exact is not None and test.exact.not_reported:
        text += f", {test.exact.not_reported} not reported by the server"
    return text


def passed_yet_differs(test: TestResult) -> str:
    """A test that passed its own KL threshold while logprobs differ (not in exact mode: a
    loose sglang file, a plain-arithmetic engine), its verdict and the count side by side;
    "" otherwise."""
    exact = test.exact
    if test.status is not Status.PASSED or exact is None or not exact.mismatched:
        return ""
    if exact.enforced:
        return ""
    threshold = f" {test.kl_threshold:g}" if test.kl_threshold is not None else ""
    return (
        f"passed under its threshold{threshold} - {exact.mismatched}/{exact.tokens} logprobs differ"
    )
