"""Blockers a pull request cannot grant itself (issue 30, item 3), on plain values."""

from __future__ import annotations

from kl_bitexact.compare.excuses import Grant, vetted
from kl_bitexact.results import model as r
from kl_bitexact.suite.references import BlockerRef

PR = BlockerRef("o", "r", 7)


def results(*tests: r.TestResult) -> r.Results:
    return r.Results(suites=(r.SuiteResult("s", r.ServerInfo("reference"), tests),))


def red(test_id: str, *blocked_by: str) -> r.TestResult:
    return r.TestResult(id=test_id, check="match", status=r.Status.FAILED, blocked_by=blocked_by)


def by_id(vetted_results: r.Results) -> dict[str, r.TestResult]:
    return {test.id: test for _, test in vetted_results.all_tests()}


def test_the_pr_itself_never_excuses_even_with_the_label_or_on_base():
    base = results(red("a", "o/r#7"))
    for grant in (Grant(PR), Grant(PR, labelled=True)):
        [test] = by_id(vetted(results(red("a", "#7", "O/R#7")), base, grant, "o/r")).values()
        assert test.blocked_by == ()
        assert len(test.warnings) == 2
        assert "it names this pull request itself" in test.warnings[0]


def test_a_marker_excuses_once_the_base_branch_has_it_on_that_test():
    base = results(red("a", "https://github.com/o/r/issues/11"), red("b"))
    head = results(red("a", "#11", "#12"), red("b", "#11"))
    vetted_tests = by_id(vetted(head, base, Grant(PR), "o/r"))
    assert vetted_tests["a"].blocked_by == ("#11",)  # the same reference, written otherwise
    assert vetted_tests["a"].warnings == (
        "blocked_by #12 not taken: this pull request adds it (the base branch's results have "
        "no such marker on this test), and a pull request cannot excuse its own red test (a "
        "maintainer's `kl-bitexact-blocked-ok` label can)",
    )
    assert vetted_tests["b"].blocked_by == ()  # on another test of the base only
    labelled = by_id(vetted(head, base, Grant(PR, labelled=True), "o/r"))
    assert labelled["a"].blocked_by == ("#11", "#12") and labelled["b"].blocked_by == ("#11",)


def test_without_base_results_no_marker_excuses_and_green_tests_keep_theirs():
    green = r.TestResult(id="g", check="match", status=r.Status.PASSED, blocked_by=("#11",))
    vetted_tests = by_id(
        vetted(results(red("a", "#11", "not a ref"), green), None, Grant(PR), "o/r")
    )
    assert vetted_tests["a"].blocked_by == ("not a ref",)  # unknown: fails closed already
    assert "no results of the base branch show it has this marker" in vetted_tests["a"].warnings[0]
    assert vetted_tests["g"] == green
