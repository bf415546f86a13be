"""Proof of new tests (pure): each new or changed test's base run against its head run."""

from __future__ import annotations

import dataclasses

import pytest
from golden_scenarios import BLOCKER, check_result, red_hicache, results

from kl_bitexact.compare.blockers import BlockerState
from kl_bitexact.compare.comparison import compare
from kl_bitexact.compare.gate import Policy
from kl_bitexact.compare.proof import Outcome, outcome_of
from kl_bitexact.errors import ExitCode
from kl_bitexact.results.model import Status

GREEN = check_result("s::t")
RED = red_hicache("s::t")


@pytest.mark.parametrize(
    ("base", "head", "outcome"),
    [
        (RED, GREEN, Outcome.PROVEN),
        (GREEN, GREEN, Outcome.UNPROVEN),
        (RED, RED, Outcome.RED_ON_BOTH),
        (RED, dataclasses.replace(GREEN, status=Status.ERROR), Outcome.RED_ON_BOTH),
        (GREEN, RED, Outcome.HEAD_NOT_GREEN),
        (dataclasses.replace(GREEN, status=Status.ERROR), GREEN, Outcome.COULD_NOT_PROVE),
        (dataclasses.replace(GREEN, status=Status.NOT_RUN), GREEN, Outcome.COULD_NOT_PROVE),
        (dataclasses.replace(GREEN, status=Status.FLAKY), GREEN, Outcome.COULD_NOT_PROVE),
        (RED, None, Outcome.COULD_NOT_PROVE),
        (RED, dataclasses.replace(GREEN, status=Status.FLAKY), Outcome.COULD_NOT_PROVE),
    ],
)
def test_outcome_of_base_and_head(base, head, outcome):
    assert outcome_of(base, head) is outcome


def test_unproven_warns_by_default_and_gates_when_strict():
    head, proof = results(GREEN), results(GREEN)
    relaxed = compare(head, None, proof=proof)
    assert relaxed.decision.passed and relaxed.outcomes == {Outcome.UNPROVEN: 1}
    strict = compare(head, None, proof=proof, policy=Policy(proof_strict=True))
    assert not strict.decision.passed and strict.decision.exit_code is ExitCode.GATE_FAILED
    assert strict.decision.reasons == ("1 new test not shown to detect anything (proof strict)",)


def test_red_on_both_is_expected_only_with_an_open_blocker():
    blocked = dataclasses.replace(RED, blocked_by=(BLOCKER,))
    head, proof = results(blocked), results(blocked)
    for state, expected in ((BlockerState.OPEN, True), (BlockerState.MERGED, False)):
        [item] = compare(head, None, proof=proof, blockers={BLOCKER: state}).proofs or ()
        assert (item.outcome, item.expected) == (Outcome.RED_ON_BOTH, expected)
    plain = compare(results(RED), None, proof=results(RED))
    assert not plain.decision.passed  # a failure as today: the head's own verdict gates


def test_could_not_prove_never_gates_even_when_strict():
    errored = dataclasses.replace(GREEN, status=Status.ERROR, message="unknown flag")
    comparison = compare(
        results(GREEN), None, proof=results(errored), policy=Policy(proof_strict=True)
    )
    assert comparison.decision.passed
    assert comparison.outcomes == {Outcome.COULD_NOT_PROVE: 1}


def test_without_a_proof_run_there_is_no_proof():
    comparison = compare(results(GREEN), None)
    assert comparison.proofs is None and not comparison.outcomes
