"""The history (pure): each test's numbers across main's runs, its standing, and the
`allow-known` gate."""

from __future__ import annotations

from pathlib import Path

import pytest
from history_runs import FLAKY_ID, RUNS, STEADY_ID, commit, main_run, pr_run, results, when
from msgspec import structs

from kl_bitexact.compare import history, history_dir
from kl_bitexact.compare.blockers import BlockerState
from kl_bitexact.compare.comparison import compare
from kl_bitexact.compare.gate import FailOn, Policy, Verdict
from kl_bitexact.compare.history import Run, Standing
from kl_bitexact.errors import ConfigError, ExitCode
from kl_bitexact.results import io as results_io
from kl_bitexact.results import model as r


def _history(count: int = RUNS) -> history.History:
    runs = [(Run(commit(i), when(i), 100 + i), main_run(i)) for i in range(count)]
    return history.build("main", list(reversed(runs)))  # any order: sorted by time


def test_a_flaky_test_is_known_with_its_count_and_first_failing_commit() -> None:
    built = _history()
    flaky = built.of(FLAKY_ID)
    assert flaky is not None
    assert (flaky.present, flaky.failed, flaky.flaky) == (20, 10, 0)
    assert built.commit_at(flaky.first_failure) == commit(1)
    assert flaky.changes == tuple(range(1, 20)) and flaky.changed
    assert built.standing(FLAKY_ID) is Standing.KNOWN


def test_a_steady_test_is_new_and_a_test_in_no_run_is_unseen() -> None:
    built = _history()
    steady = built.of(STEADY_ID)
    assert steady is not None and steady.steady and not steady.changed
    assert built.standing(STEADY_ID) is Standing.NEW
    assert built.standing("added-by-the-pr") is Standing.UNSEEN
    assert [t.id for t in built.attention] == [FLAKY_ID]


def test_numbers_that_change_without_failing_are_a_change_not_a_failure() -> None:
    runs = []
    for i in range(4):
        test = r.TestResult(
            id="t", check="match", status=r.Status.PASSED, kl_div=0.0 if i < 2 else 1e-12
        )
        runs.append((Run(commit(i), f"2026-05-01T0{i}:00:00Z"), results(test)))
    built = history.build("main", runs)
    found = built.of("t")
    assert found is not None and found.failed == 0
    assert found.changes == (2,) and built.commit_at(found.changes[0]) == commit(2)
    assert built.standing("t") is Standing.NEW


def test_an_error_on_main_does_not_make_a_test_known() -> None:
    errored = r.TestResult(id="t", check="match", status=r.Status.ERROR, message="server died")
    built = history.build("main", [(Run(commit(0), "2026-05-01T00:00:00Z"), results(errored))])
    assert built.standing("t") is Standing.NEW


def _compare(
    policy: Policy, built: history.History | None
) -> dict[str, tuple[Verdict, bool, bool]]:
    comparison = compare(pr_run(), main_run(RUNS - 1), policy=policy, history=built)
    return {
        d.id: (d.verdict, d.gating, d.known_let_through)
        for d in comparison.deltas
        if d.verdict is not None
    }


def test_allow_known_lets_the_known_flaky_test_through_and_the_new_failure_still_gates() -> None:
    built = _history()
    strict = _compare(Policy(FailOn.REGRESSION), built)
    # The newest main run (19) had 16/32 too: still failing, excused by the base already.
    assert strict[FLAKY_ID] == (Verdict.STILL_FAILING, False, False)
    assert strict[STEADY_ID] == (Verdict.REGRESSION, True, False)
    failure = _compare(Policy(FailOn.FAILURE), built)
    assert failure[FLAKY_ID] == (Verdict.STILL_FAILING, True, False)  # default: strict
    known = _compare(Policy(FailOn.FAILURE, allow_known=True), built)
    assert known[FLAKY_ID] == (Verdict.STILL_FAILING, False, True)
    assert known[STEADY_ID] == (Verdict.REGRESSION, True, False)
    comparison = compare(pr_run(), None, policy=Policy(allow_known=True), history=built)
    by_id = {d.id: d for d in comparison.deltas}
    assert by_id[FLAKY_ID].known_let_through and not by_id[FLAKY_ID].gating
    assert by_id[STEADY_ID].gating and by_id[STEADY_ID].standing is Standing.NEW
    assert comparison.decision.exit_code is ExitCode.GATE_FAILED
    assert comparison.decision.reasons == ("1 failing (no base result)",)


def test_allow_known_without_a_history_lets_nothing_through() -> None:
    assert _compare(Policy(FailOn.FAILURE, allow_known=True), None)[FLAKY_ID][1] is True


def test_a_blocked_test_is_never_let_through_by_its_history() -> None:
    head = pr_run()
    suite = head.suites[0]
    blocked = structs.replace(suite.tests[0], blocked_by=("#12",))
    head = structs.replace(head, suites=(structs.replace(suite, tests=(blocked,)),))
    comparison = compare(
        head,
        None,
        policy=Policy(FailOn.FAILURE, allow_known=True),
        history=_history(),
        blockers={"octo/engine#12": BlockerState.MERGED},
        default_repo="octo/engine",
    )
    (delta,) = comparison.deltas
    assert delta.gating and not delta.known_let_through


# --- the offline directory -----------------------------------------------------------------


def test_a_history_dir_is_read_newest_n_in_time_order(tmp_path: Path) -> None:
    for i in range(RUNS):
        # File names in no particular order: the time inside decides.
        results_io.write_atomic(main_run(i), tmp_path / f"run-{1000 - i}.json")
    (tmp_path / "notes.txt").write_text("not a results file")
    built = history_dir.load(tmp_path, 5)
    assert built.branch == "main"
    assert [run.commit for run in built.runs] == [commit(i) for i in range(15, 20)]
    assert [run.run_id for run in built.runs] == [985, 984, 983, 982, 981]


def test_a_bad_file_in_a_history_dir_is_left_out_and_said_so(tmp_path: Path) -> None:
    results_io.write_atomic(main_run(0), tmp_path / "run-1.json")
    (tmp_path / "run-2.json").write_text('{"schema_version": 99}')
    (tmp_path / "run-3.json").symlink_to(tmp_path / "run-1.json")
    built = history_dir.load(tmp_path, 20)
    assert len(built.runs) == 1
    assert [note.split(":")[0] for note in built.notes] == [
        "run-2.json left out",
        "run-3.json left out",
    ]


def test_a_history_dir_that_is_not_one_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a directory"):
        history_dir.load(tmp_path / "missing", 20)
    for i in range(history_dir.MAX_FILES + 1):
        (tmp_path / f"{i}.json").write_text("{}")
    with pytest.raises(ConfigError, match="over the limit of 400"):
        history_dir.load(tmp_path, 20)


def test_allow_known_lets_through_no_more_than_10x_the_worst_its_history_failed_with() -> None:
    # Issue 31: a GPU test always a little red is "known"; a cache bug 250x worse is not.
    def drift(kl: float, status: r.Status = r.Status.FAILED) -> r.TestResult:
        return r.TestResult(
            id="gpu::prefill", check="prefill_cache_hit", status=status, kl_div=kl,
            kl_threshold=1e-9, kl_per_sample=(kl,),
        )  # fmt: skip

    runs = [(Run(commit(i), when(i)), results(drift(kl))) for i, kl in enumerate((4e-7, 3e-7))]
    built = history.build("main", runs)
    policy = Policy(FailOn.FAILURE, allow_known=True)
    for kl, let_through in ((1e-6, True), (1e-4, False)):
        (delta,) = compare(results(drift(kl)), None, policy=policy, history=built).deltas
        assert delta.known_let_through is let_through and delta.gating is not let_through
    assert delta.worse == ("avg KL 4.00e-07 → 1.00e-04 (250x) against the history's worst",)


def test_allow_known_does_not_let_through_what_the_history_never_measured() -> None:
    # Issue 36, item 3: history's failures lack the number (hits red, KL never printed), so
    # a head KL of 3.0 was "no worse than the worst": known_let_through, exit 0.
    def hits_red(kl: float | None) -> r.TestResult:
        return r.TestResult(
            id="gpu::decode", check="decode_cache_hit", status=r.Status.FAILED, kl_div=kl,
            kl_threshold=1e-9, cache_hits=r.CacheHits(hit=16, total=32, min_ratio=0.99),
        )  # fmt: skip

    runs = [(Run(commit(i), when(i)), results(hits_red(None))) for i in range(2)]
    built = history.build("main", runs)
    policy = Policy(FailOn.FAILURE, allow_known=True)
    comparison = compare(results(hits_red(3.0)), None, policy=policy, history=built)
    (delta,) = comparison.deltas
    assert not delta.known_let_through and delta.gating
    assert delta.worse == (
        "avg KL 3.00e+00 where the history's failures recorded none (cannot tell it is no worse)",
    )
    assert comparison.decision.exit_code is ExitCode.GATE_FAILED
    # The same numbers as history's failures are what allow-known lets through.
    same = compare(results(hits_red(None)), None, policy=policy, history=built).deltas[0]
    assert same.known_let_through and not same.gating
