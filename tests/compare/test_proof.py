"""Proof of new tests (pure): each new or changed test's base run against its head run."""

from __future__ import annotations

import pytest
from golden_scenarios import BLOCKER, check_result, red_hicache, results
from msgspec import structs

from kl_bitexact.compare.blockers import BlockerState
from kl_bitexact.compare.comparison import compare
from kl_bitexact.compare.gate import Policy
from kl_bitexact.compare.proof import Outcome, outcome_of, why_not_proven
from kl_bitexact.errors import ExitCode
from kl_bitexact.ingest.nodeids import UNIT_CHECK, under
from kl_bitexact.results.model import Status, TestResult

GREEN = check_result("s::t")
RED = red_hicache("s::t")


@pytest.mark.parametrize(
    ("base", "head", "outcome"),
    [
        (RED, GREEN, Outcome.PROVEN),
        (GREEN, GREEN, Outcome.UNPROVEN),
        (RED, RED, Outcome.RED_ON_BOTH),
        (RED, structs.replace(GREEN, status=Status.ERROR), Outcome.RED_ON_BOTH),
        (GREEN, RED, Outcome.HEAD_NOT_GREEN),
        (structs.replace(GREEN, status=Status.ERROR), GREEN, Outcome.COULD_NOT_PROVE),
        (structs.replace(GREEN, status=Status.NOT_RUN), GREEN, Outcome.COULD_NOT_PROVE),
        (structs.replace(GREEN, status=Status.FLAKY), GREEN, Outcome.COULD_NOT_PROVE),
        (RED, None, Outcome.COULD_NOT_PROVE),
        (RED, structs.replace(GREEN, status=Status.FLAKY), Outcome.COULD_NOT_PROVE),
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
    blocked = structs.replace(RED, blocked_by=(BLOCKER,))
    head, proof = results(blocked), results(blocked)
    for state, expected in ((BlockerState.OPEN, True), (BlockerState.MERGED, False)):
        [item] = compare(head, None, proof=proof, blockers={BLOCKER: state}).proofs or ()
        assert (item.outcome, item.expected) == (Outcome.RED_ON_BOTH, expected)
    plain = compare(results(RED), None, proof=results(RED))
    assert not plain.decision.passed  # a failure as today: the head's own verdict gates


def test_could_not_prove_never_gates_even_when_strict():
    errored = structs.replace(GREEN, status=Status.ERROR, message="unknown flag")
    comparison = compare(
        results(GREEN), None, proof=results(errored), policy=Policy(proof_strict=True)
    )
    assert comparison.decision.passed
    assert comparison.outcomes == {Outcome.COULD_NOT_PROVE: 1}


def test_without_a_proof_run_there_is_no_proof():
    comparison = compare(results(GREEN), None)
    assert comparison.proofs is None and not comparison.outcomes


# --- a proof of registered Python files (`pytest --prove-base`): entries for whole units --

FILE = "test/registered/kl/test_x.py"


def _unit_error(unit: str, why: str) -> TestResult:
    return TestResult(id=unit, check=UNIT_CHECK, status=Status.ERROR, message=why)


def test_a_unit_that_ran_nothing_on_base_stands_for_each_head_test_under_it():
    head = results(
        check_result(f"{FILE}::TestA::test_one"),
        check_result(f"{FILE}::TestA::test_two[page-16]"),
        check_result(f"{FILE}::TestAB::test_one"),  # another class: not under TestA
        check_result(f"{FILE}::TestB::test_three"),
    )
    proof = results(
        red_hicache(f"{FILE}::TestB::test_three"),
        _unit_error(f"{FILE}::TestA", "does not import on the base revision: ImportError"),
    )
    proofs = compare(head, None, proof=proof).proofs or ()
    assert [(p.id, p.outcome) for p in proofs] == [
        (f"{FILE}::TestB::test_three", Outcome.PROVEN),
        (f"{FILE}::TestA::test_one", Outcome.COULD_NOT_PROVE),
        (f"{FILE}::TestA::test_two[page-16]", Outcome.COULD_NOT_PROVE),
    ]
    assert why_not_proven(proofs[1]).endswith("does not import on the base revision: ImportError")


def test_a_unit_with_no_head_test_under_it_is_left_out_but_a_missing_test_is_said():
    # A base class without tests of its own is no test on either side.
    head = results(check_result(f"{FILE}::TestA::test_one"))
    proof = results(
        _unit_error(f"{FILE}::KLBase", "collected no test"),
        red_hicache(f"{FILE}::TestGone::test_one"),
    )
    [item] = compare(head, None, proof=proof).proofs or ()
    assert (item.id, item.outcome) == (f"{FILE}::TestGone::test_one", Outcome.COULD_NOT_PROVE)
    assert why_not_proven(item) == "the head's results hold no such test"


@pytest.mark.parametrize(
    ("test_id", "unit", "inside"),
    [
        (f"{FILE}::TestA::test_one", FILE, True),
        (f"{FILE}::TestA::test_one", f"{FILE}::TestA", True),
        (f"{FILE}::TestA::test_one", f"{FILE}::TestA::test_one", True),
        (f"{FILE}::test_one[2-x]", f"{FILE}::test_one", True),
        (f"{FILE}::TestAB::test_one", f"{FILE}::TestA", False),
        (f"{FILE}::test_one_more", f"{FILE}::test_one", False),
        ("test/registered/kl/test_xy.py::TestA::t", FILE, False),
        # pytest rooted in test/ (an ini file there): its ids lack the prefix
        ("registered/kl/test_x.py::TestA::test_one", f"{FILE}::TestA", True),
        ("kl/other/test_x.py::TestA::test_one", f"{FILE}::TestA", False),
    ],
)
def test_under_a_unit(test_id, unit, inside):
    assert under(test_id, unit) is inside
