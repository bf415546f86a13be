"""compare: matching by id, transitions, deltas, blockers and the baseline's absence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from golden_scenarios import check_result, red_hicache, results
from msgspec import structs

from kl_bitexact.compare import baseline
from kl_bitexact.compare.baseline import Baseline
from kl_bitexact.compare.blockers import BlockerState
from kl_bitexact.compare.comparison import Transition, compare, transition_of
from kl_bitexact.compare.gate import FailOn, Policy, Verdict
from kl_bitexact.errors import ConfigError, ExitCode
from kl_bitexact.report import render
from kl_bitexact.results import io as results_io
from kl_bitexact.results import model as r
from kl_bitexact.suite.references import BlockerRef

S = r.Status


@pytest.mark.parametrize(
    ("base", "head", "expected"),
    [
        (S.PASSED, S.FAILED, Transition.REGRESSED),
        # Nothing measured is never "regressed" (issue 27): the runner, not the change.
        (S.PASSED, S.ERROR, Transition.NEWLY_NOT_RUN),
        (S.FAILED, S.ERROR, Transition.NEWLY_NOT_RUN),
        (S.ERROR, S.ERROR, Transition.UNCHANGED),
        (S.FAILED, S.FAILED, Transition.STILL_FAILING),
        (S.ERROR, S.FAILED, Transition.STILL_FAILING),
        (S.FAILED, S.PASSED, Transition.FIXED),
        (S.PASSED, S.PASSED, Transition.UNCHANGED),
        (S.PASSED, S.NOT_RUN, Transition.NEWLY_NOT_RUN),
        (S.FAILED, S.SKIPPED, Transition.NEWLY_NOT_RUN),
        (S.NOT_RUN, S.SKIPPED, Transition.UNCHANGED),
        (S.NOT_RUN, S.FAILED, Transition.REGRESSED),
    ],
)
def test_transitions(base, head, expected):
    assert transition_of(check_result("t", head), check_result("t", base), True) is expected


def test_new_and_no_base_are_different():
    head = check_result("t")
    assert transition_of(head, None, have_base=True) is Transition.NEW
    assert transition_of(head, None, have_base=False) is Transition.NO_BASE


def test_matches_by_id_and_reports_removed_tests_and_kl_change():
    head = results(red_hicache("a"), check_result("b"))
    base = results(check_result("a", kl_div=1e-5), check_result("gone"))
    comparison = compare(head, base)
    by_id = {d.id: d for d in comparison.deltas}
    assert by_id["a"].transition is Transition.REGRESSED
    assert by_id["a"].kl_change == pytest.approx(9.53e-05 - 1e-5)
    assert by_id["b"].transition is Transition.NEW
    assert by_id["gone"].transition is Transition.REMOVED and by_id["gone"].head is None
    assert comparison.transitions[Transition.REMOVED] == 1


def test_missing_baseline_keeps_its_reason_and_fails_closed():
    head = results(red_hicache("a"))
    comparison = compare(head, Baseline(None, "base.json does not exist"))
    assert comparison.baseline.unavailable == "base.json does not exist"
    assert comparison.deltas[0].transition is Transition.NO_BASE
    assert comparison.deltas[0].gating  # nothing proves the red pre-existed
    assert comparison.decision.exit_code is ExitCode.GATE_FAILED


def test_regression_mode_passes_a_test_already_red_on_the_base():
    head = results(red_hicache("a"), check_result("b"))
    comparison = compare(head, results(red_hicache("a"), check_result("b")))
    # Red on both is not a regression, in any rendering (issue 20).
    assert comparison.deltas[0].verdict is Verdict.STILL_FAILING
    assert not comparison.deltas[0].gating
    assert comparison.decision.passed


def test_failure_mode_fails_on_a_test_already_red_on_the_base():
    head = results(red_hicache("a"), check_result("b"))
    comparison = compare(head, head, policy=Policy(FailOn.FAILURE))
    assert comparison.decision.reasons == ("1 still failing (red on base too)",)


def test_regression_only_for_green_on_base_and_red_here():
    head = results(red_hicache("a"), red_hicache("b"), red_hicache("new"), check_result("c"))
    base = results(check_result("a"), red_hicache("b"), check_result("c"))
    verdicts = {d.id: d.verdict for d in compare(head, base).deltas}
    assert verdicts == {
        "a": Verdict.REGRESSION,
        "b": Verdict.STILL_FAILING,
        "new": Verdict.FAILING,  # the base has no result for it
        "c": Verdict.OK,
    }
    assert compare(head, None).verdicts[Verdict.FAILING] == 3  # no base: nothing regressed


@pytest.mark.parametrize(
    "written",
    ["#29792", "sgl-project/sglang#29792", "https://github.com/sgl-project/sglang/pull/29792"],
)
def test_blockers_are_canonicalised_before_lookup(written):
    head = results(red_hicache("a", blocked_by=(written,)))
    comparison = compare(
        head,
        None,
        blockers={"SGL-Project/SGLang#29792": BlockerState.OPEN},
        default_repo="sgl-project/sglang",
    )
    delta = comparison.deltas[0]
    assert delta.blockers[0].ref == "sgl-project/sglang#29792"
    assert delta.verdict is Verdict.EXPECTED_RED
    assert comparison.blockers_resolved


def test_unresolved_or_unparsable_blockers_are_unknown():
    head = results(
        red_hicache("a", blocked_by=("o/r#1",)), red_hicache("b", blocked_by=("not a ref",))
    )
    comparison = compare(head, None)
    assert [d.verdict for d in comparison.deltas] == [Verdict.UNKNOWN, Verdict.UNKNOWN]
    assert comparison.deltas[1].blockers[0].ref is None
    assert not comparison.blockers_resolved


def test_counts_cover_every_test():
    head = results(red_hicache("a"), check_result("b"), check_result("c", S.SKIPPED))
    comparison = compare(head, None)
    assert comparison.verdicts == {Verdict.FAILING: 1, Verdict.OK: 1, Verdict.SKIPPED: 1}


def write(tmp_path: Path, document: object) -> Path:
    path = tmp_path / "base.json"
    path.write_text(json.dumps(document))
    return path


def test_baseline_of_another_schema_version_is_a_reason(tmp_path: Path):
    document = results_io.to_json(results(check_result("a")))
    loaded = baseline.load(write(tmp_path, {**document, "schema_version": 2}))
    assert loaded.results is None
    assert "schema_version 2 is not supported" in loaded.unavailable


def test_missing_baseline_file_is_an_error(tmp_path: Path):
    with pytest.raises(ConfigError, match=r"nope\.json: no such file"):
        baseline.load(tmp_path / "nope.json")


def test_a_notice_only_for_a_baseline_asked_for_and_unavailable():
    assert baseline.notice(Baseline()) is None  # none asked for
    assert baseline.notice(Baseline(results())) is None
    # The reason can quote the file: no terminal control sequence reaches stderr.
    line = baseline.notice(Baseline(None, "b.json: schema_version 2 is not supported\x1b[2J"))
    assert (
        line
        == "kl-bitexact: no deltas: baseline unavailable: b.json: schema_version 2 is not supported"
    )


def test_readable_baseline_loads(tmp_path: Path):
    original = results(check_result("a"))
    loaded = baseline.load(write(tmp_path, results_io.to_json(original)))
    assert loaded == Baseline(original, "")


def test_kl_change_needs_both_sides():
    head = results(structs.replace(check_result("a"), kl_div=None))
    assert compare(head, results(check_result("a"))).deltas[0].kl_change is None


def test_blocker_states_may_be_keyed_by_parsed_references():
    head = results(red_hicache("a", blocked_by=("o/r#1",)))
    comparison = compare(head, None, blockers={BlockerRef("o", "r", 1): BlockerState.OPEN})
    assert comparison.deltas[0].verdict is Verdict.EXPECTED_RED


# --- tests without a verdict (issue 14, case 1) ----------------------------------------


def test_a_planned_test_without_verdict_is_an_error_that_gates_not_removed():
    head = structs.replace(
        results(check_result("a"), check_result("b")),
        run=r.RunInfo(finished=False),
    )
    assert head.plan is not None
    head = structs.replace(
        head, plan=(*head.plan, r.PlannedTest("hicache-mamba", "c", "multiturn"))
    )
    base = results(check_result("a"), check_result("b"), check_result("c"))
    comparison = compare(head, base)
    lost = {d.id: d for d in comparison.deltas}["c"]
    assert lost.transition is Transition.NEWLY_NOT_RUN and lost.verdict is Verdict.COULD_NOT_RUN
    assert lost.head is not None
    assert lost.gating and "the run stopped before this planned test" in lost.head.message
    assert Transition.REMOVED not in comparison.transitions
    # The gate fails as could not run (exit 2): the run stopped, nothing blames the change.
    assert comparison.decision.exit_code is ExitCode.COULD_NOT_RUN


def test_without_a_plan_a_missing_base_test_cannot_be_called_removed():
    head = results(check_result("a"), planned=False)
    comparison = compare(head, results(check_result("a"), check_result("gone")))
    lost = {d.id: d for d in comparison.deltas}["gone"]
    assert lost.verdict is Verdict.COULD_NOT_RUN and lost.gating
    assert lost.head is not None and "record no plan" in lost.head.message
    assert not comparison.decision.passed


def test_a_test_outside_the_heads_plan_was_removed_by_the_pr():
    comparison = compare(results(check_result("a")), results(check_result("a"), check_result("x")))
    removed = {d.id: d for d in comparison.deltas}["x"]
    assert removed.transition is Transition.REMOVED and not removed.gating
    assert comparison.decision.passed


def cpu_red(test_id: str, kl: float) -> r.TestResult:
    """A test red on the CPU base: llama.cpp's last-bit drift, over sglang's 1e-9."""
    return check_result(
        test_id,
        S.FAILED,
        kl_div=kl,
        kl_per_sample=(kl,) * 32,
        exact=r.ExactMatch(tokens=160, mismatched=150),
    )


def test_a_test_red_on_base_whose_kl_grew_100x_is_a_regression():
    # CPU results as the base, GPU ones as the head (issue 31): every test was "still
    # failing" and the gate passed a 240x jump.
    base = results(cpu_red("grew", 4.16e-7), cpu_red("same", 4.16e-7), cpu_red("5x", 4.16e-7))
    head = results(cpu_red("grew", 4.16e-5), cpu_red("same", 4.5e-7), cpu_red("5x", 2.08e-6))
    comparison = compare(head, base)
    by_id = {d.id: d for d in comparison.deltas}
    grew = by_id["grew"]
    assert (grew.verdict, grew.transition) == (Verdict.REGRESSION, Transition.REGRESSED)
    assert grew.gating and grew.worse == ("avg KL 4.16e-07 → 4.16e-05 (100x)",)
    for name in ("same", "5x"):  # within 10x: still failing, excused by the base
        assert by_id[name].verdict is Verdict.STILL_FAILING and not by_id[name].gating
        assert by_id[name].worse == ()
    assert comparison.decision.reasons == ("1 regression",)
    comment = render.comment(comparison)
    assert "Red before too, but more than 10x worse than then, so it is no pre-existing" in comment
    assert "avg KL 4.16e-07 → 4.16e-05 (100x)" in comment


def test_more_missed_hits_or_more_differing_logprobs_than_a_red_base_are_regressions():
    hits = r.CacheHits(hit=31, total=32, min_ratio=0.99)
    base = results(
        check_result("hits", S.FAILED, cache_hits=hits),
        check_result(
            "exact", S.FAILED, cache_hits=hits, exact=r.ExactMatch(4096, 0, enforced=True)
        ),
    )
    head = results(
        check_result("hits", S.FAILED, cache_hits=structs.replace(hits, hit=16)),
        check_result(
            "exact", S.FAILED, cache_hits=hits, exact=r.ExactMatch(4096, 7, enforced=True)
        ),
    )
    worse = {d.id: d.worse for d in compare(head, base).deltas}
    assert worse == {
        "hits": ("missed cache hits 3.12% → 50% (16x)",),
        "exact": ("differing logprobs 0% → 0.171%",),
    }


def test_an_interrupted_or_partial_baseline_excuses_nothing():
    # Issue 30, item 4: an interrupted base (finished: false) excused an interrupted head:
    # "gate passed, 3 still failing".
    red = [check_result(name, S.ERROR, message="interrupted: SIGTERM") for name in "abc"]
    head = structs.replace(results(*red), run=r.RunInfo(finished=False))
    base = structs.replace(results(*red), run=r.RunInfo(finished=False))
    comparison = compare(head, base)
    assert all(d.gating for d in comparison.deltas)
    assert not comparison.decision.passed
    # A base missing planned tests (a kill -9, a lost shard) is no more complete.
    failed = [check_result(name, S.FAILED) for name in "abc"]
    partial = results(*failed)
    assert partial.plan is not None
    partial = structs.replace(
        partial, plan=(*partial.plan, r.PlannedTest("hicache-mamba", "d", "multiturn"))
    )
    assert compare(results(*failed), partial).decision.exit_code is ExitCode.GATE_FAILED
    # The same red on a finished, whole base is what regression mode excuses.
    assert compare(results(*failed), results(*failed)).decision.passed


def hits_red(test_id: str, **changes: object) -> r.TestResult:
    """Red on decode cache hits 16/32; what a pytest import records when the hits assertion
    fires before the KL is printed: no KL, no per-sample KLs, no logprobs compared."""
    hits = r.CacheHits(hit=16, total=32, min_ratio=0.99)
    unmeasured: dict[str, object] = {"kl_div": None, "kl_per_sample": None, "exact": None}
    return check_result(test_id, S.FAILED, cache_hits=hits, **{**unmeasured, **changes})


def test_a_base_that_never_recorded_a_number_cannot_excuse_it_growing():
    # Issue 36, item 2: base red on hits with kl_div null; head KL 3.0 with 150/192 logprobs
    # differing was `still_failing`, excused by the base: exit 0.
    head = hits_red("t", kl_div=3.0, kl_per_sample=(3.0,) * 32, exact=r.ExactMatch(192, 150))
    comparison = compare(results(head), results(hits_red("t")))
    (delta,) = comparison.deltas
    assert delta.verdict is Verdict.REGRESSION and delta.gating
    assert delta.worse == (
        "avg KL 3.00e+00 where the base recorded none (cannot tell it is no worse)",
        "differing logprobs 78.1% where the base recorded none (cannot tell it is no worse)",
    )
    assert comparison.decision.exit_code is ExitCode.GATE_FAILED
    # The base measured what the head did not: no more told either way.
    swapped = compare(results(hits_red("t")), results(head)).deltas[0]
    assert swapped.gating and swapped.worse[0].startswith("avg KL: the head recorded none")
    # Neither side measured it: nothing to compare, the same red is still failing.
    same = compare(results(hits_red("t")), results(hits_red("t"))).deltas[0]
    assert same.verdict is Verdict.STILL_FAILING and not same.gating and same.worse == ()


# --- issue 36, item 1: plans survive every merge; a pass backed by nothing is never ok ---


def _run_part(planned_ids: str, reported: str, **changes: object) -> r.Results:
    """A `run` killed after its first tests: its plan names every test it meant to run."""
    part = results(*(check_result(name, S.PASSED, **changes) for name in reported))
    plan = tuple(r.PlannedTest("hicache-mamba", name, "multiturn") for name in planned_ids)
    return structs.replace(part, plan=plan, run=r.RunInfo(finished=False))


def _pytest_part(*tests: r.TestResult) -> r.Results:
    """`kl-bitexact pytest`'s results: no plan recorded."""
    return structs.replace(results(*tests, suite="test_file.py"), plan=None)


def test_a_part_without_a_plan_keeps_the_other_parts_plan_when_merged():
    # SIGKILL after 3 of 8 tests beside a plan-less pytest part: the merged results had no
    # plan and 4 tests, and report gave exit 0, 4 ok - the 5 planned tests were gone.
    plain = r.TestResult(id="test_file.py::test_plain", check="pytest", status=S.PASSED)
    merged = results_io.merge(
        [("run", _run_part("abcdefgh", "abc")), ("pytest", _pytest_part(plain))]
    )
    assert merged.plan is not None and [i.id for i in merged.missing()] == list("defgh")
    comparison = compare(merged, None)
    assert sum(d.verdict is Verdict.COULD_NOT_RUN for d in comparison.deltas) == 5
    assert comparison.decision.exit_code is ExitCode.COULD_NOT_RUN
    # The plan-less part still cannot tell a removed test from a lost one.
    base = results(*(check_result(name) for name in "abcdefgh"), check_result("gone"))
    lost = {d.id: d for d in compare(merged, base).deltas}["gone"]
    assert lost.verdict is Verdict.COULD_NOT_RUN and lost.gating
    # ...and merging it again (publish's shard merge of the action's results) keeps that.
    again = results_io.merge([("merged", merged)])
    assert {d.id: d for d in compare(again, base).deltas}["gone"].gating


def test_a_planned_pass_backed_by_nothing_stays_an_error_once_merged():
    # A `passed` with null KL, threshold and exact was exit 1 alone and exit 0 once merged.
    empty = {"kl_div": None, "kl_threshold": None, "kl_per_sample": None, "exact": None}
    alone = _run_part("a", "a", **empty)
    assert compare(alone, None).decision.exit_code is ExitCode.GATE_FAILED
    plain = r.TestResult(id="test_file.py::test_plain", check="pytest", status=S.PASSED)
    merged = results_io.merge([("run", alone), ("pytest", _pytest_part(plain))])
    delta = {d.id: d for d in compare(merged, None).deltas}["a"]
    assert delta.verdict is Verdict.INFRA and delta.gating


def test_a_kl_check_that_passed_with_nothing_measured_is_never_ok_planned_or_not():
    # A decode_cache_hit test `passed` with every number null was "✅ ok", dashes in every column.
    hollow = r.TestResult(id="t::decode", check="decode_cache_hit", status=S.PASSED)
    comparison = compare(structs.replace(results(hollow), plan=None), None)
    (delta,) = comparison.deltas
    assert delta.verdict is Verdict.INFRA and delta.gating
    assert delta.head is not None and "recorded no KL threshold" in delta.head.message


def test_a_passed_test_that_is_not_a_kl_check_is_shown_as_such():
    plain = r.TestResult(id="test_file.py::test_plain", check="pytest", status=S.PASSED)
    comparison = compare(_pytest_part(plain), None)
    (delta,) = comparison.deltas
    assert delta.verdict is Verdict.NOT_A_KL_CHECK and not delta.gating
    comment = render.comment(comparison)
    assert "passed - not a KL check" in comment
    # A run planned it (a plan that names it): the same, not an error about its check.
    planned = compare(results(structs.replace(plain, id="p")), None).deltas[0]
    assert planned.verdict is Verdict.NOT_A_KL_CHECK


def test_a_stopped_run_whose_part_recorded_no_plan_has_a_hole_nobody_can_name():
    # Issue 36: a part without a plan that did not finish (run.finished false) lost tests
    # nobody can name; merged beside a finished, planned part it passed.
    done = structs.replace(
        _run_part("ab", "ab"), run=r.RunInfo(commit="1a2b3c4d5e6f", finished=True)
    )
    plain = r.TestResult(id="test_file.py::test_plain", check="pytest", status=S.PASSED)
    stopped = structs.replace(_pytest_part(plain), run=r.RunInfo(finished=False))
    comparison = compare(results_io.merge([("run", done), ("pytest", stopped)]), None)
    assert comparison.decision.exit_code is ExitCode.COULD_NOT_RUN
    assert comparison.decision.reasons[0].startswith("the run stopped early and a part of it")
    # Finished, or its plan recorded: nothing unnamed is missing.
    finished = structs.replace(stopped, run=r.RunInfo(finished=True))
    assert compare(results_io.merge([("run", done), ("pytest", finished)]), None).decision.passed
