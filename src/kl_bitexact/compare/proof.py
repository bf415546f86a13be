"""Proof of new tests: each test a PR adds or changes, run on the base revision too (pure).

A bit-exact test is worth what it detects. The proof run (`run --prove-base DIR`) runs the
head's new and changed tests with the base revision's engine; its results (the proof
file) hold exactly those tests. Against the head's results each one is:

- proven: red on base, green on head - the test catches what the PR fixes
  (seed PR 35293's revert-then-red: KL 1.10e-01 with the fix reverted, 0 with it);
- unproven: green on base too - nothing shows that it detects anything (a warning;
  `--proof-strict` makes it gate);
- red on both: expected when the head test is blocked by an open PR (seed PR 34356),
  otherwise the head's own verdict already fails it;
- could not prove: the base run errored or measured nothing (the base cannot run the
  test, e.g. a flag it does not know) - said plainly, never gating;
- not green on head: the base was green, the head is not - the head's verdict says why.

A proof of registered Python files (`pytest --prove-base`) may hold an entry for a whole
unit (`file.py::Class`, `file.py`) that ran nothing on the base (the file does not import
there): it stands for each head test under the unit, as could not prove; a unit with no head
test under it either (a base class without tests) is no test on either side, and is left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from kl_bitexact.compare.gate import RED, Verdict
from kl_bitexact.ingest.nodeids import UNIT_CHECK, under
from kl_bitexact.results.model import Results, Status, TestResult


class Outcome(str, Enum):
    PROVEN = "proven"
    UNPROVEN = "unproven"  # green on base too: not shown to detect anything
    RED_ON_BOTH = "red_on_both"
    COULD_NOT_PROVE = "could_not_prove"
    HEAD_NOT_GREEN = "head_not_green"


@dataclass(frozen=True)
class Proof:
    """One new or changed test: its base run, its head run, and what they show."""

    suite: str
    id: str
    base: TestResult
    head: TestResult | None  # None: the head's results do not hold the test
    outcome: Outcome
    expected: bool = False  # red on both, and the head test is blocked by an open PR
    gating: bool = False


def prove(
    proof: Results, head: Results, verdicts: Mapping[str, Verdict], *, strict: bool = False
) -> tuple[Proof, ...]:
    """Every test of the proof run against the head's result of the same id; `verdicts`
    are the head tests' gate verdicts (an expected red is told by its blocker)."""
    heads = {test.id: test for _, test in head.all_tests()}
    on_base = {test.id for _, test in proof.all_tests()}
    proofs = []
    for suite, base in proof.all_tests():
        for test_id, current in _heads_for(base, heads, on_base):
            outcome = outcome_of(base, current)
            expected = (
                outcome is Outcome.RED_ON_BOTH and verdicts.get(test_id) is Verdict.EXPECTED_RED
            )
            gating = strict and outcome is Outcome.UNPROVEN
            proofs.append(Proof(suite.name, test_id, base, current, outcome, expected, gating))
    return tuple(proofs)


def _heads_for(
    base: TestResult, heads: Mapping[str, TestResult], on_base: set[str]
) -> list[tuple[str, TestResult | None]]:
    """The head tests a base entry is judged against: the one of its id; else, for a unit
    (a class or file of a Python test file), each head test under it with no base entry of
    its own; else none (None: shown as missing from the head's results)."""
    if base.id in heads:
        return [(base.id, heads[base.id])]
    below = [(i, test) for i, test in heads.items() if i not in on_base and under(i, base.id)]
    if below or base.check == UNIT_CHECK:
        return list(below)
    return [(base.id, None)]


def outcome_of(base: TestResult, head: TestResult | None) -> Outcome:
    if head is None or base.status not in (Status.PASSED, Status.FAILED):
        return Outcome.COULD_NOT_PROVE
    head_green = head.status is Status.PASSED
    if base.status is Status.FAILED:
        if head_green:
            return Outcome.PROVEN
        return Outcome.RED_ON_BOTH if head.status in RED else Outcome.COULD_NOT_PROVE
    return Outcome.UNPROVEN if head_green else Outcome.HEAD_NOT_GREEN


def why_not_proven(proof: Proof) -> str:
    """For `could not prove`: what kept the base (or head) run from telling, in words."""
    if proof.head is None:
        return "the head's results hold no such test"
    if proof.base.status not in (Status.PASSED, Status.FAILED):
        return f"the base run {_DID[proof.base.status]}: {proof.base.message}"
    return f"the head run {_DID[proof.head.status]}"


_DID = {
    Status.ERROR: "errored",
    Status.NOT_RUN: "measured nothing",
    Status.NOT_EXERCISED: "did not exercise what the test claims",
    Status.SKIPPED: "was skipped",
    Status.FLAKY: "was flaky (its repeats disagree)",
    Status.PASSED: "passed",
    Status.FAILED: "failed",
}
