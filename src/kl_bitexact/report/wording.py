"""The words and icons every rendering of a comparison shares (pure); numbers: results.formats."""

from __future__ import annotations

from kl_bitexact.compare.comparison import Transition
from kl_bitexact.compare.gate import Verdict
from kl_bitexact.results.formats import fmt_kl
from kl_bitexact.results.model import Status, TestResult

ICON = {
    Verdict.REGRESSION: "🔴",
    Verdict.FAILING: "🔴",
    Verdict.COULD_NOT_RUN: "🔌",
    Verdict.INFRA: "⚠️",
    Verdict.NOT_EXERCISED: "🚫",
    Verdict.FLAKY: "🎲",
    Verdict.UNKNOWN: "❓",
    Verdict.STALE_MARKER: "🧹",
    Verdict.STILL_FAILING: "🟤",
    Verdict.EXPECTED_RED: "🟠",
    Verdict.UNEXPECTED_GREEN: "🟡",
    Verdict.UNBLOCKED: "🔓",
    Verdict.NOT_A_KL_CHECK: "☑️",
    Verdict.SKIPPED: "⏭️",
    Verdict.OK: "✅",
}

LABEL = {
    Verdict.REGRESSION: "regression",
    Verdict.FAILING: "failing (no base result)",
    Verdict.COULD_NOT_RUN: "could not run",
    Verdict.INFRA: "did not measure",
    Verdict.NOT_EXERCISED: "not exercised",
    Verdict.FLAKY: "flaky",
    Verdict.UNKNOWN: "blocker unknown",
    Verdict.STALE_MARKER: "stale marker",
    Verdict.STILL_FAILING: "still failing (red on base too)",
    Verdict.EXPECTED_RED: "expected red",
    Verdict.UNEXPECTED_GREEN: "unexpected green",
    Verdict.UNBLOCKED: "unblocked",
    Verdict.NOT_A_KL_CHECK: "passed - not a KL check",
    Verdict.SKIPPED: "skipped",
    Verdict.OK: "ok",
}

TRANSITION = {
    Transition.REGRESSED: "regressed",
    Transition.NEWLY_NOT_RUN: "newly not run",
    Transition.STILL_FAILING: "still failing (red on base too)",
    Transition.FIXED: "fixed",
    Transition.NEW: "new",
    Transition.REMOVED: "removed",
    Transition.UNCHANGED: "unchanged",
    Transition.NO_BASE: "no base",
}


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
