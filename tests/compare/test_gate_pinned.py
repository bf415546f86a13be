"""The gate's decision pinned where the mutation run of issue 22 found it unheld: what a run
of only errors means, the order of reasons, the exit code of a report-only gate."""

from __future__ import annotations

import pytest
from golden_scenarios import check_result, results
from msgspec import structs

from kl_bitexact.compare.blockers import BlockerState
from kl_bitexact.compare.comparison import compare
from kl_bitexact.compare.gate import FailOn, Policy, Verdict, decide
from kl_bitexact.errors import ExitCode
from kl_bitexact.results.model import Status


def test_a_run_in_which_every_test_errored_could_not_run():
    head = results(check_result("a", Status.ERROR), check_result("b", Status.ERROR))
    decision = compare(head, None).decision
    assert decision.exit_code is ExitCode.COULD_NOT_RUN
    assert (decision.verdict, decision.label) == ("could_not_run", "could not run")
    assert decision.passed is False


def test_errors_beside_passing_tests_could_not_run_and_never_blame_the_change():
    # Issue 27: a gate failed only by tests that did not measure (the server, the runner,
    # the run) could not run - exit 2, commit status error - as `run` always said.
    head = results(check_result("a", Status.ERROR), check_result("b", Status.PASSED))
    decision = compare(head, None).decision
    assert decision.exit_code is ExitCode.COULD_NOT_RUN
    assert decision.reasons == ("1 could not run",)
    assert decision.label == "could not run" and not decision.passed


def test_a_red_test_beside_errors_is_a_failed_gate_of_an_incomplete_run():
    # Issue 31: a run with a hole in it is not a clean red run (exit 2); what it did
    # measure is said beside (issue 27).
    head = results(check_result("a", Status.ERROR), check_result("b", Status.FAILED))
    decision = compare(head, None).decision
    assert decision.exit_code is ExitCode.COULD_NOT_RUN and decision.red
    assert decision.label == "gate failed, run incomplete"
    assert decision.reasons == ("1 failing (no base result)", "1 could not run")


def test_reasons_are_ordered_by_severity_whatever_the_input_order():
    gating = {Verdict.UNKNOWN: 1, Verdict.INFRA: 3, Verdict.REGRESSION: 2, Verdict.OK: 0}
    decision = decide(gating, executed=5, policy=Policy())
    assert decision.reasons == (
        "2 regressions",
        "3 did not measure",
        "1 blocker unknown",
    )
    assert (decision.passed, decision.exit_code, decision.label) == (
        False,
        ExitCode.GATE_FAILED,
        "gate failed",
    )


@pytest.mark.parametrize(
    ("verdict", "one", "many"),
    [
        (Verdict.REGRESSION, "1 regression", "2 regressions"),
        (Verdict.INFRA, "1 did not measure", "2 did not measure"),
        (Verdict.UNKNOWN, "1 blocker unknown", "2 blockers unknown"),
        (
            Verdict.STALE_MARKER,
            "1 stale marker",
            "2 stale markers",
        ),
        (
            Verdict.UNEXPECTED_GREEN,
            "1 unexpected green",
            "2 unexpected green",
        ),
    ],
)
def test_each_reason_in_singular_and_plural(verdict, one, many):
    assert decide({verdict: 1}, 1, Policy()).reasons == (one,)
    assert decide({verdict: 2}, 2, Policy()).reasons == (many,)


def test_report_only_gate_passes_with_exit_zero_and_says_so():
    decision = decide({Verdict.REGRESSION: 4}, executed=4, policy=Policy(FailOn.NEVER))
    assert decision.exit_code is ExitCode.GATE_PASSED
    assert int(decision.exit_code) == 0
    assert (decision.passed, decision.report_only, decision.reasons) == (True, True, ())
    assert (decision.verdict, decision.label) == ("passed", "report only (gate off)")


def test_nothing_executed_could_not_run_even_in_report_only_mode():
    decision = decide({}, executed=0, policy=Policy(FailOn.NEVER))
    assert decision.exit_code is ExitCode.COULD_NOT_RUN
    assert decision.reasons == ("no test executed (all skipped, not run, or no tests at all)",)


def test_a_clean_run_passes_without_reasons():
    decision = decide({Verdict.REGRESSION: 0}, executed=3, policy=Policy())
    assert (decision.passed, decision.exit_code, decision.reasons) == (
        True,
        ExitCode.GATE_PASSED,
        (),
    )
    assert (decision.verdict, decision.label, decision.report_only) == (
        "passed",
        "gate passed",
        False,
    )


@pytest.mark.parametrize(
    ("status", "gating", "reasons"),
    [
        (Status.FAILED, True, ("1 stale marker",)),
        (Status.PASSED, False, ()),
    ],
)
def test_a_stale_marker_through_compare(status, gating, reasons):
    head = results(check_result("a", status, blocked_by=("#5",)))
    comparison = compare(head, None, blockers={"o/r#5": BlockerState.CLOSED}, default_repo="o/r")
    (delta,) = comparison.deltas
    assert (delta.verdict, delta.gating) == (Verdict.STALE_MARKER, gating)
    assert delta.blockers[0].ref == "o/r#5"
    assert comparison.decision.reasons == reasons


def test_a_test_only_in_the_base_keeps_its_base_values():
    base_test = check_result("gone", Status.FAILED, kl_div=0.5)
    comparison = compare(results(check_result("kept")), results(check_result("kept"), base_test))
    (gone,) = [d for d in comparison.deltas if d.id == "gone"]
    assert (gone.head, gone.base, gone.suite) == (None, base_test, "hicache-mamba")
    assert gone.kl_change is None


def test_proof_strict_gates_nothing_without_unproven_tests():
    decision = decide({}, 1, Policy(proof_strict=True))
    assert (decision.passed, decision.reasons) == (True, ())


@pytest.mark.parametrize(("unproven", "shown"), [(1, "1 new test"), (2, "2 new tests")])
def test_unproven_tests_add_to_the_other_reasons_under_proof_strict(unproven, shown):
    decision = decide({Verdict.REGRESSION: 1}, 3, Policy(proof_strict=True), unproven)
    assert decision.reasons == (
        "1 regression",
        f"{shown} not shown to detect anything (proof strict)",
    )


@pytest.mark.parametrize(
    ("planned", "finished", "why"),
    [
        (False, None, "which record no plan, so a removed test cannot be told from a lost one"),
        (True, False, "no verdict: the run stopped before this planned test (it did not finish)"),
        (True, True, "no verdict: planned by the run but missing from its results"),
    ],
)
def test_a_test_without_a_verdict_says_why(planned, finished, why):
    lost = check_result("lost", Status.FAILED, kl_div=0.5)
    head = results(check_result("kept"), lost, planned=planned)
    # the head reports only "kept"; with a plan, "lost" is planned and missing
    suite = structs.replace(head.suites[0], tests=head.suites[0].tests[:1])
    head = structs.replace(head, suites=(suite,), run=structs.replace(head.run, finished=finished))
    base = results(check_result("kept"), lost)
    (delta,) = [d for d in compare(head, base).deltas if d.id == "lost"]
    assert delta.head is not None and delta.head.status is Status.ERROR
    assert delta.head.message.endswith(why) and delta.head.check == lost.check
    assert delta.base == lost


def test_a_blocker_keeps_the_text_the_test_gave():
    head = results(check_result("a", Status.FAILED, blocked_by=("#5",)))
    comparison = compare(head, None, blockers={"o/r#5": BlockerState.OPEN}, default_repo="o/r")
    (blocker,) = comparison.deltas[0].blockers
    assert (blocker.text, blocker.ref, blocker.state) == ("#5", "o/r#5", BlockerState.OPEN)


@pytest.mark.parametrize(
    ("default_repo", "reason"),
    [
        (
            None,
            "#N with no repository known: pass --repo OWNER/NAME or set GITHUB_REPOSITORY",
        ),
        ("o/r", None),
    ],
)
def test_a_short_reference_without_a_repository_says_how_to_give_one(default_repo, reason):
    head = results(check_result("a", Status.FAILED, blocked_by=("#5",)))
    (blocker,) = compare(head, None, blockers={}, default_repo=default_repo).deltas[0].blockers
    assert (blocker.ref is None) == (reason is not None)
    if reason is not None:
        assert (blocker.state, blocker.reason) == (BlockerState.UNKNOWN, reason)
