"""The merge gate: per-test verdicts (the blocked-by table of issue 7) and the run's decision."""

from __future__ import annotations

import pytest
from golden_scenarios import check_result

from kl_bitexact.compare.blockers import BlockerState
from kl_bitexact.compare.gate import (
    FailOn,
    FailOnChoice,
    Policy,
    Verdict,
    decide,
    excused_by_base,
    gates,
    parse_fail_on,
    verdict,
    worse_than_base,
)
from kl_bitexact.errors import ExitCode
from kl_bitexact.results.model import CacheHits, ExactMatch, Repeats, Status, TestResult

OPEN, MERGED, CLOSED, UNKNOWN = (
    BlockerState.OPEN,
    BlockerState.MERGED,
    BlockerState.CLOSED,
    BlockerState.UNKNOWN,
)


@pytest.mark.parametrize(
    ("state", "status", "expected", "gating"),
    [
        (OPEN, Status.FAILED, Verdict.EXPECTED_RED, False),
        (OPEN, Status.PASSED, Verdict.UNEXPECTED_GREEN, False),
        (MERGED, Status.FAILED, Verdict.REGRESSION, True),
        (MERGED, Status.PASSED, Verdict.UNBLOCKED, False),
        (CLOSED, Status.FAILED, Verdict.STALE_MARKER, True),
        (CLOSED, Status.PASSED, Verdict.STALE_MARKER, False),
        (UNKNOWN, Status.FAILED, Verdict.UNKNOWN, True),
        (UNKNOWN, Status.PASSED, Verdict.UNKNOWN, True),
    ],
)
def test_every_row_of_the_blocked_by_table(state, status, expected, gating):
    test = check_result("t", status, blocked_by=("o/r#1",))
    assert verdict(test, [state]) is expected
    assert gates(expected, test, Policy(FailOn.FAILURE)) is gating


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (Status.PASSED, Verdict.OK),
        (Status.FAILED, Verdict.REGRESSION),
        (Status.ERROR, Verdict.COULD_NOT_RUN),
        (Status.NOT_RUN, Verdict.INFRA),
        (Status.SKIPPED, Verdict.SKIPPED),
    ],
)
def test_unblocked_tests_follow_their_status(status, expected):
    assert verdict(check_result("t", status), []) is expected


def test_not_run_is_never_excused_by_an_open_blocker():
    test = check_result("t", Status.NOT_RUN, blocked_by=("o/r#1",))
    assert verdict(test, [OPEN]) is Verdict.INFRA


def test_an_error_with_an_open_blocker_is_expected_red():
    test = check_result("t", Status.ERROR, blocked_by=("o/r#1",))
    assert verdict(test, [OPEN]) is Verdict.EXPECTED_RED


@pytest.mark.parametrize("state", [MERGED, UNKNOWN])
def test_an_error_with_a_merged_or_unknown_blocker_could_not_run(state):
    """A dead server under a blocked test is a hole in the run (exit 2), not a regression of
    the change nor an unknown blocker's red (exit 1): `run`, with no GitHub, knows no state."""
    test = check_result("t", Status.ERROR, blocked_by=("o/r#1",))
    assert verdict(test, [state]) is Verdict.COULD_NOT_RUN
    failed = check_result("t", Status.FAILED, blocked_by=("o/r#1",))
    assert verdict(failed, [state]) is {MERGED: Verdict.REGRESSION, UNKNOWN: Verdict.UNKNOWN}[state]


def test_an_error_with_a_closed_blocker_still_says_the_marker_is_stale():
    test = check_result("t", Status.ERROR, blocked_by=("o/r#1",))
    assert verdict(test, [CLOSED]) is Verdict.STALE_MARKER


def test_any_open_blocker_keeps_a_test_blocked():
    test = check_result("t", Status.FAILED, blocked_by=("o/r#1", "o/r#2"))
    assert verdict(test, [MERGED, OPEN]) is Verdict.EXPECTED_RED


def test_strict_makes_unexpected_green_gate():
    test = check_result("t", blocked_by=("o/r#1",))
    assert not gates(Verdict.UNEXPECTED_GREEN, test, Policy())
    assert gates(Verdict.UNEXPECTED_GREEN, test, Policy(strict=True))


def test_unknown_blockers_can_be_allowed():
    test = check_result("t", Status.FAILED, blocked_by=("o/r#1",))
    assert not gates(Verdict.UNKNOWN, test, Policy(allow_unknown=True))


def test_never_mode_gates_nothing():
    test = check_result("t", Status.FAILED)
    assert not gates(Verdict.REGRESSION, test, Policy(FailOn.NEVER))


@pytest.mark.parametrize(
    ("head", "base", "excused"),
    [
        (Status.FAILED, Status.FAILED, True),
        (Status.FAILED, Status.ERROR, True),
        (Status.NOT_RUN, Status.NOT_RUN, True),
        (Status.FAILED, Status.PASSED, False),
        (Status.NOT_RUN, Status.PASSED, False),
        (Status.FAILED, Status.NOT_RUN, False),
        (Status.FAILED, None, False),
    ],
)
def test_regression_mode_excuses_only_what_the_base_already_showed(head, base, excused):
    test = check_result("t", head)
    base_test = None if base is None else check_result("t", base)
    assert excused_by_base(verdict(test, []), test, base_test) is excused


def test_a_merged_blocker_still_red_is_never_excused_by_the_base():
    test = check_result("t", Status.FAILED, blocked_by=("o/r#1",))
    assert not excused_by_base(Verdict.REGRESSION, test, test)


def test_decision_names_the_reasons_most_severe_first():
    decision = decide({Verdict.UNKNOWN: 1, Verdict.REGRESSION: 2}, executed=5, policy=Policy())
    assert (decision.passed, decision.exit_code) == (False, ExitCode.GATE_FAILED)
    assert decision.reasons == ("2 regressions", "1 blocker unknown")
    assert decision.label == "gate failed"


def test_decision_passes_with_nothing_gating():
    decision = decide({}, executed=1, policy=Policy())
    assert (decision.passed, decision.exit_code, decision.label) == (True, 0, "gate passed")


@pytest.mark.parametrize("fail_on", list(FailOn))
def test_nothing_executed_could_not_run_whatever_the_policy(fail_on):
    decision = decide({}, executed=0, policy=Policy(fail_on))
    assert decision.exit_code is ExitCode.COULD_NOT_RUN
    assert not decision.passed


def test_report_only_passes_and_says_so():
    decision = decide({}, executed=3, policy=Policy(FailOn.NEVER))
    assert (decision.passed, decision.verdict, decision.label) == (
        True,
        "passed",
        "report only (gate off)",
    )


# --- flaky (run --repeat) -----------------------------------------------------------------


def flaky(*statuses: Status, blocked_by: tuple[str, ...] = ()):
    evidence = Repeats(count=len(statuses), changed=3, positions=24, statuses=statuses)
    return check_result("s::t", Status.FLAKY, repeats=evidence, blocked_by=blocked_by)


@pytest.mark.parametrize(
    ("statuses", "policy", "gating"),
    [
        ((Status.PASSED, Status.PASSED), Policy(), False),  # report only by default
        ((Status.PASSED, Status.PASSED), Policy(flaky=True), True),
        ((Status.PASSED, Status.FAILED), Policy(), True),  # a red repeat is never retried away
        ((Status.PASSED, Status.FAILED), Policy(FailOn.NEVER, flaky=True), False),
    ],
)
def test_a_flaky_test_gates_by_policy_or_when_a_repeat_was_red(statuses, policy, gating):
    test = flaky(*statuses)
    assert verdict(test, []) is Verdict.FLAKY
    assert gates(Verdict.FLAKY, test, policy) is gating


def test_a_flaky_test_is_flaky_whatever_its_blockers_say():
    assert verdict(flaky(Status.PASSED, Status.PASSED, blocked_by=("#1",)), [OPEN]) is Verdict.FLAKY


def test_flaky_tests_executed_and_are_named_in_the_reasons():
    decision = decide({Verdict.FLAKY: 2}, executed=2, policy=Policy(flaky=True))
    assert (
        decision.reasons == ("2 flaky (repeats disagree)",)
        and decision.exit_code is ExitCode.GATE_FAILED
    )


@pytest.mark.parametrize(
    ("unreached", "policy", "reasons"),
    [
        (
            2,
            Policy(unreached=True),
            ("2 changed functions not shown to run under the bit-exact suites (unreached)",),
        ),
        (
            1,
            Policy(unreached=True),
            ("1 changed function not shown to run under the bit-exact suites (unreached)",),
        ),
        (0, Policy(unreached=True), ()),
        (
            None,
            Policy(unreached=True),
            ("fail-on unreached: the run recorded no PR change (run --reach-diff BASE)",),
        ),
        (2, Policy(), ()),  # off by default
        (None, Policy(), ()),
    ],
)
def test_unreached_changed_functions_gate_only_when_asked(unreached, policy, reasons):
    decision = decide({}, executed=1, policy=policy, unreached=unreached)
    assert decision.reasons == reasons
    assert decision.exit_code is (ExitCode.GATE_FAILED if reasons else ExitCode.GATE_PASSED)


def test_fail_on_unreached_round_trips():
    choice = parse_fail_on("failure,unreached")
    assert choice.unreached and choice.mode is FailOn.FAILURE and not choice.flaky
    assert parse_fail_on(str(choice)) == choice
    assert Policy(FailOn.FAILURE, unreached=True).fail_on_text == "failure,unreached"


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("regression", (FailOn.REGRESSION, False, False)),
        ("never", (FailOn.NEVER, False, False)),
        ("flaky", (FailOn.REGRESSION, True, False)),
        ("failure,flaky", (FailOn.FAILURE, True, False)),
        (" flaky , never ", (FailOn.NEVER, True, False)),
        ("allow-known", (FailOn.REGRESSION, False, True)),
        ("failure,allow-known,flaky", (FailOn.FAILURE, True, True)),
    ],
)
def test_fail_on_parses_a_mode_and_flaky(text, parsed):
    choice = parse_fail_on(text)
    assert (choice.mode, choice.flaky, choice.allow_known) == parsed


def test_the_default_fail_on_is_plain_regression():
    # run's default (`run.Options.fail_on`) is what `--fail-on regression` gives: no modifier.
    assert FailOnChoice() == parse_fail_on("regression") and str(FailOnChoice()) == "regression"
    assert Policy().fail_on_text == "regression"


@pytest.mark.parametrize(
    "text", ["always", "regression,failure", "flaky,flakey", "allow-known-flaky"]
)
def test_fail_on_refuses_anything_else(text):
    with pytest.raises(ValueError, match="is not one of regression, failure, never"):
        parse_fail_on(text)


def _red(**numbers: object) -> TestResult:
    """A red match test of 1 sample: only the numbers given (the rest not measured)."""
    unmeasured: dict[str, object] = {"kl_per_sample": None, "exact": None, "cache_hits": None}
    return check_result("t", Status.FAILED, **{**unmeasured, **numbers})


@pytest.mark.parametrize(
    ("base", "head", "worse"),
    [
        # From 0, growth counts only when the head fails that measure's rule (issue 31).
        (_red(kl_div=0.0), _red(kl_div=1e-12), ()),  # under the threshold 1e-9
        (_red(kl_div=0.0), _red(kl_div=1e-9), ("avg KL 0 → 1.00e-09",)),  # not below it
        # Exactly 10x is no more than WORSE_FACTOR times.
        (_red(kl_div=0.5), _red(kl_div=5.0), ()),
        (_red(kl_div=0.5), _red(kl_div=5.5), ("avg KL 5.00e-01 → 5.50e+00 (11x)",)),
        # One sample: a miss is 100% of it (the share of one is a share, not "unknown").
        (
            _red(cache_hits=CacheHits(1, 1, 0.99)),
            _red(cache_hits=CacheHits(0, 1, 0.99)),
            ("missed cache hits 0% → 100%",),
        ),
        # Missed hits from 0 that still pass the ratio are no growth.
        (_red(cache_hits=CacheHits(4, 4, 0.5)), _red(cache_hits=CacheHits(3, 4, 0.5)), ()),
        # Nothing compared is no share at all: not a division by zero.
        (_red(exact=ExactMatch(0, 0)), _red(exact=ExactMatch(0, 0)), ()),
        # A head that measured 0 where the base measured nothing grew from nothing.
        (_red(kl_div=None), _red(kl_div=0.0), ()),
    ],
)
def test_worse_than_base_at_its_boundaries(
    base: TestResult, head: TestResult, worse: tuple[str, ...]
) -> None:
    assert worse_than_base(head, base) == worse


def test_a_decision_told_no_count_of_unreached_functions_cannot_tell_none_were():
    # Issue 36: a count nobody passed is unknown, not 0 ("every changed function ran").
    decision = decide({}, executed=1, policy=Policy(unreached=True))
    assert decision.reasons == (
        "fail-on unreached: the run recorded no PR change (run --reach-diff BASE)",
    )
