"""The proof of new tests in the comment: a headline line and one item per test (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from kl_bitexact.compare.comparison import Comparison
from kl_bitexact.compare.proof import Outcome, Proof, why_not_proven
from kl_bitexact.report.budget import Block, Section
from kl_bitexact.results.formats import fmt_kl
from kl_bitexact.results.model import TestResult
from kl_bitexact.untrusted import escape

ICON = {
    Outcome.PROVEN: "🧪",
    Outcome.UNPROVEN: "🔎",
    Outcome.RED_ON_BOTH: "🔴",
    Outcome.COULD_NOT_PROVE: "❔",
    Outcome.HEAD_NOT_GREEN: "🔴",
}

LABEL = {
    Outcome.PROVEN: "proven",
    Outcome.UNPROVEN: "not shown to detect anything",
    Outcome.RED_ON_BOTH: "red on both",
    Outcome.COULD_NOT_PROVE: "could not prove",
    Outcome.HEAD_NOT_GREEN: "red on head only",
}


def headline(comparison: Comparison) -> str | None:
    """`New tests: 🧪 1 proven · 🔎 1 not shown to detect anything ...`, or None
    without a proof run."""
    if comparison.proofs is None:
        return None
    counts = comparison.outcomes
    parts = [f"{ICON[o]} {counts[o]:,} {LABEL[o]}" for o in Outcome if counts[o]]
    if not parts:
        return "New or changed tests: none to prove  "
    return "New or changed tests on the base revision: " + " · ".join(parts) + "  "


def section(comparison: Comparison, gating_tier: int, notes_tier: int) -> Section:
    proofs = comparison.proofs or ()
    blocks = [
        Block(gating_tier if p.gating else notes_tier, partial(item, p), "proof notes")
        for p in proofs
    ]
    head = (
        "\n### Proof of new tests\n\n"
        "Each new or changed test, run with the base revision's engine and this head's "
        "test definition:\n\n"
    )
    return Section(blocks, head=head)


def item(proof: Proof) -> str:
    test = f"{escape.code(proof.id, 160)} ({escape.text(proof.suite, 80)})"
    icon = "🟠" if proof.expected else ICON[proof.outcome]
    return f"- {icon} {test}: {_sentence(proof)}\n"


def _sentence(proof: Proof) -> str:
    label = f"**{LABEL[proof.outcome]}**"
    numbers = _numbers(proof.base, proof.head)
    if proof.outcome is Outcome.PROVEN:
        return f"{label} - red on base, green on head: {numbers}"
    if proof.outcome is Outcome.UNPROVEN:
        gates = "; gates the merge (proof strict)" if proof.gating else ""
        return (
            f"{label} - green on base too ({numbers}): this test does not catch what the "
            f"PR changes{gates}"
        )
    if proof.outcome is Outcome.RED_ON_BOTH:
        why = (
            "expected while its blocker is open"
            if proof.expected
            else "a failure on head, as on base (see its row above)"
        )
        return f"{label} - {why}: {numbers}"
    if proof.outcome is Outcome.HEAD_NOT_GREEN:
        return f"{label} - green on base, not on head (see its row above): {numbers}"
    reason = escape.text(why_not_proven(proof), 400)
    return f"{label} - {reason}; not gating"


def _numbers(base: TestResult, head: TestResult | None) -> str:
    """`KL 1.10e-01 -> 0 · differing logprobs 130/512 -> 0/512`."""
    parts = [f"KL {fmt_kl(base.kl_div)} -> {fmt_kl(head.kl_div if head else None)}"]
    if base.exact is not None or (head is not None and head.exact is not None):
        parts.append(f"differing logprobs {_exact(base)} -> {_exact(head)}")
    return " · ".join(parts)


def _exact(test: TestResult | None) -> str:
    if test is None or test.exact is None:
        return "-"
    return f"{test.exact.mismatched}/{test.exact.tokens}"


def outcomes_json(proofs: Sequence[Proof] | None) -> list[dict[str, object]] | None:
    """The proof in `report --json`."""
    if proofs is None:
        return None
    return [
        {
            "suite": p.suite,
            "id": p.id,
            "outcome": p.outcome.value,
            "expected": p.expected,
            "gating": p.gating,
            "base_kl_div": p.base.kl_div,
            "kl_div": p.head.kl_div if p.head else None,
        }
        for p in proofs
    ]
