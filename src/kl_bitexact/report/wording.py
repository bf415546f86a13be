"""The words, icons and number formats every rendering of a comparison shares (pure)."""

from __future__ import annotations

from kl_bitexact.compare.comparison import Transition
from kl_bitexact.compare.gate import Verdict
from kl_bitexact.results.model import TestResult

ICON = {
    Verdict.REGRESSION: "🔴",
    Verdict.INFRA: "⚠️",
    Verdict.UNKNOWN: "❓",
    Verdict.STALE_MARKER: "🧹",
    Verdict.EXPECTED_RED: "🟠",
    Verdict.UNEXPECTED_GREEN: "🟡",
    Verdict.UNBLOCKED: "🔓",
    Verdict.SKIPPED: "⏭️",
    Verdict.OK: "✅",
}

LABEL = {
    Verdict.REGRESSION: "regression",
    Verdict.INFRA: "did not measure",
    Verdict.UNKNOWN: "blocker unknown",
    Verdict.STALE_MARKER: "stale marker",
    Verdict.EXPECTED_RED: "expected red",
    Verdict.UNEXPECTED_GREEN: "unexpected green",
    Verdict.UNBLOCKED: "unblocked",
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

MISSING = "-"  # a value the test did not produce


def plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def fmt_kl(value: float | None) -> str:
    """Exact zero as `0` (bit-exact is the point), anything else in 3 significant digits."""
    if value is None:
        return MISSING
    return "0" if value == 0 else f"{value:.2e}"


def measured(test: TestResult) -> str:
    """What a red test measured, in words: its KL and how many logprobs differ."""
    text = f"measured {fmt_kl(test.kl_div)}"
    if test.exact is not None and test.exact.mismatched:
        text += f", {test.exact.mismatched}/{test.exact.tokens} logprobs differ"
    return text
