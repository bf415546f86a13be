"""Blockers a pull request cannot grant itself (issue 30, item 3), on plain values."""

from __future__ import annotations

from kl_bitexact.compare.comparison import compare
from kl_bitexact.compare.excuses import Grant, Labelling, promised, vetted
from kl_bitexact.compare.gate import Verdict
from kl_bitexact.results import model as r
from kl_bitexact.suite.references import BlockerRef

PR = BlockerRef("o", "r", 7)
# The label on PR #7 (by alice), put there by a maintainer.
VOUCHED = Grant(PR, labelled=Labelling(by="maintainer", author="alice"))


def results(*tests: r.TestResult) -> r.Results:
    return r.Results(suites=(r.SuiteResult("s", r.ServerInfo("reference"), tests),))


def red(test_id: str, *blocked_by: str) -> r.TestResult:
    return r.TestResult(id=test_id, check="match", status=r.Status.FAILED, blocked_by=blocked_by)


def by_id(vetted_results: r.Results) -> dict[str, r.TestResult]:
    return {test.id: test for _, test in vetted_results.all_tests()}


def test_the_pr_itself_never_excuses_even_with_the_label_or_on_base():
    base = results(red("a", "o/r#7"))
    for grant in (Grant(PR), VOUCHED):
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
    labelled = by_id(vetted(head, base, VOUCHED, "o/r"))
    assert labelled["a"].blocked_by == ("#11", "#12") and labelled["b"].blocked_by == ("#11",)


def test_without_base_results_no_marker_excuses_and_green_tests_keep_theirs():
    green = r.TestResult(id="g", check="match", status=r.Status.PASSED, blocked_by=("#11",))
    vetted_tests = by_id(
        vetted(results(red("a", "#11", "not a ref"), green), None, Grant(PR), "o/r")
    )
    assert vetted_tests["a"].blocked_by == ("not a ref",)  # unknown: fails closed already
    assert "no results of the base branch show it has this marker" in vetted_tests["a"].warnings[0]
    assert vetted_tests["g"] == green


def test_the_label_vouches_only_when_someone_other_than_the_author_added_it():
    head = results(red("a", "#11"))
    by_author = Grant(PR, labelled=Labelling(by="Alice", author="alice"))  # logins ignore case
    [test] = vetted(head, None, by_author, "o/r").all_tests()
    assert test[1].blocked_by == ()
    assert test[1].warnings == (
        "blocked_by #11 not taken: no results of the base branch show it has this marker, and "
        "a pull request cannot excuse its own red test (the `kl-bitexact-blocked-ok` label was "
        "added by the PR's author, Alice; a maintainer other than the author must add it)",
    )
    [(_, vouched)] = vetted(head, None, VOUCHED, "o/r").all_tests()
    assert vouched.blocked_by == ("#11",) and vouched.warnings == ()


def test_a_label_a_bot_added_vouches_for_nothing():
    grant = Grant(PR, labelled=Labelling(by="ci-bot[bot]", author="alice", by_bot=True))
    [(_, test)] = vetted(results(red("a", "#11")), None, grant, "o/r").all_tests()
    assert test.blocked_by == ()
    assert "label was added by a bot, ci-bot[bot], which acts for whoever" in test.warnings[0]


def test_a_label_whose_labeller_is_not_known_vouches_for_nothing():
    unknown = (
        Labelling(None, "alice", "GitHub answered 403 while reading the pull request's events"),
        Labelling("maintainer", None, "GitHub does not say who opened the pull request"),
        Labelling(None, None),
    )
    for labelled in unknown:
        grant = Grant(PR, label="ok-to-excuse", labelled=labelled)
        [(_, test)] = vetted(results(red("a", "#11")), None, grant, "o/r").all_tests()
        assert test.blocked_by == ()
        unchecked = "(the `ok-to-excuse` label is on it, but who added it could not be checked ("
        assert unchecked in test.warnings[0]
        assert test.warnings[0].endswith(
            "; it counts only when a maintainer other than the PR's author adds it)"
        )
        assert (labelled.unchecked or "GitHub did not say") in test.warnings[0]


def test_the_pull_request_a_base_marker_names_is_expected_to_turn_the_test_green():
    # Issue 36, item 11: the base carries `blocked_by: ['#7']`; PR #7 leaves the test red.
    base = results(red("a", "o/r#7"), red("b", "#11"))
    for head in (results(red("a", "#7"), red("b", "#11")), results(red("a"), red("b", "#11"))):
        ids = promised(head, base, Grant(PR), "o/r")
        assert ids == frozenset({"a"})
        comparison = compare(vetted(head, base, Grant(PR), "o/r"), base, promised=ids)
        delta = {d.id: d for d in comparison.deltas}["a"]
        assert delta.verdict is Verdict.REGRESSION and delta.gating
        assert not comparison.decision.passed
