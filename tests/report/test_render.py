"""render: the comment's shape, its budget, hostile strings, annotations and the JSON verdict."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from typing import Any

import pytest
from gfm_check import assert_renders_safely
from golden_scenarios import BLOCKER, LINKS, check_result, red_hicache, results
from hostile_text import ISSUE_REF, MENTION, hidden, hostile
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from msgspec import structs

from kl_bitexact.compare.blockers import BlockerState
from kl_bitexact.compare.comparison import Comparison, compare
from kl_bitexact.compare.gate import FailOn, Policy
from kl_bitexact.registry.findings import Severity
from kl_bitexact.registry.findings_file import Finding
from kl_bitexact.report import render, sections
from kl_bitexact.results import formats as wording
from kl_bitexact.results import model as r
from kl_bitexact.untrusted import escape

# --- hypothesis: any results ------------------------------------------------------------

kl_values = st.one_of(
    st.none(), st.just(0.0), st.floats(allow_nan=True, allow_infinity=True, width=64)
)
statuses = st.sampled_from(list(r.Status))


@st.composite
def result_of_one_test(draw: st.DrawFn, test_id: str) -> r.TestResult:
    samples = draw(st.lists(st.floats(min_value=0, max_value=10), max_size=40))
    divergence = st.builds(
        r.Divergence,
        sample=st.integers(0, 100),
        token_index=st.integers(0, 10_000),
        hint=hostile,
        decode_logprob=st.one_of(st.none(), st.floats()),
    )
    return r.TestResult(
        id=test_id,
        check=draw(hostile),
        status=draw(statuses),
        kl_div=draw(kl_values),
        kl_threshold=1e-9,
        kl_per_sample=tuple(samples),
        exact=draw(
            st.none() | st.builds(r.ExactMatch, st.integers(0, 10**6), st.integers(0, 10**6))
        ),
        cache_hits=draw(
            st.none() | st.builds(r.CacheHits, st.integers(0, 64), st.just(32), st.floats(0, 1))
        ),
        first_divergence=tuple(draw(st.lists(divergence, max_size=3))),
        blocked_by=tuple(
            draw(st.lists(st.one_of(hostile, st.just(BLOCKER), st.just("#5")), max_size=2))
        ),
        message=draw(hostile),
        warnings=tuple(draw(st.lists(hostile, max_size=2))),
    )


@st.composite
def any_results(draw: st.DrawFn, max_tests: int = 12) -> r.Results:
    # A suffix keeps ids and names unique (results.merge guarantees unique ids).
    ids = [
        f"{text}~{i}"
        for i, text in enumerate(draw(st.lists(hostile, min_size=1, max_size=max_tests)))
    ]
    suite_names = [
        f"{text}~{i}" for i, text in enumerate(draw(st.lists(hostile, min_size=1, max_size=3)))
    ]
    per_suite: dict[str, list[r.TestResult]] = {name: [] for name in suite_names}
    for index, test_id in enumerate(ids):
        per_suite[suite_names[index % len(suite_names)]].append(draw(result_of_one_test(test_id)))
    server = r.ServerInfo(draw(hostile), tuple(draw(st.lists(hostile, max_size=3))))
    suites = tuple(r.SuiteResult(name, server, tuple(tests)) for name, tests in per_suite.items())
    return r.Results(run=r.RunInfo(commit=draw(hostile)), suites=suites)


def any_comparison(draw: Callable[[st.SearchStrategy[Any]], Any]) -> Comparison:
    head = draw(any_results())
    base = draw(st.none() | st.just(head) | any_results())
    states = draw(
        st.sampled_from([None, {BLOCKER: BlockerState.OPEN}, {BLOCKER: BlockerState.MERGED}])
    )
    policy = Policy(draw(st.sampled_from(list(FailOn))), draw(st.booleans()))
    return compare(head, base, blockers=states, policy=policy, default_repo="o/r")


ALLOWED_TAGS = {"code", "pre", "details", "summary", "sub", "br"}
TABLE_PIPES = {6, 7, 8}  # findings (5), divergences (6) and test (7) tables: columns + 1


# A chart's y-axis range is mermaid's `0 --> MAX`, ours, inside a code fence: not a comment end.
_CHART_AXIS = re.compile(r'^  y-axis "KL[^"\n]*" 0 --> [0-9.]+$', flags=re.MULTILINE)


def assert_structurally_safe(body: str, comparison: Comparison) -> None:
    body = _CHART_AXIS.sub("", body)
    tags = re.findall(r"<(/?)([a-zA-Z!][\w-]*)", body)
    assert {name for _, name in tags} <= ALLOWED_TAGS | {"!--"}
    assert body.count("<details>") == body.count("</details>")
    assert body.count("<pre>") == body.count("</pre>")
    assert body.count("<!--") == 1 and body.count("-->") == 1
    ours = ("```mermaid\n", "```\n", "`--blockers`", "`blocked_by`", "`kl-bitexact report")
    for literal in ours:
        body = body.replace(literal, "")
    assert "`" not in body
    assert not MENTION.search(html.unescape(body))
    for line in body.splitlines():
        if line.startswith("|"):
            assert line.count("|") in TABLE_PIPES, line
    canonical = {b.ref for d in comparison.deltas for b in d.blockers if b.ref}
    seen = html.unescape(body)
    for ref in canonical:
        seen = seen.replace(ref, "")
    assert not re.search(r"#\d", seen)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_any_results_render_safely_under_the_budget(data: st.DataObject):
    comparison = any_comparison(data.draw)
    findings = data.draw(
        st.lists(
            st.builds(
                Finding,
                hostile,
                st.none() | st.integers(1, 9),
                hostile,
                st.sampled_from(["error", "warning"]),
                hostile,
                hostile,
            ),
            max_size=3,
        )
    )
    budget = data.draw(st.integers(min_value=4_000, max_value=render.COMMENT_LIMIT))
    body = render.comment(comparison, key="k", findings=findings, links=LINKS, budget=budget)
    event("trimmed" if "Trimmed to fit" in body else "whole")
    assert len(body) <= budget
    assert body.startswith("<!-- kl-bitexact:k -->\n## ")
    assert_structurally_safe(body, comparison)
    refs = {b.ref for d in comparison.deltas for b in d.blockers if b.ref}
    blockers = [sections.blocker_url(ref) for ref in refs]
    assert_renders_safely(body, [LINKS.run or "", LINKS.artifact or "", *blockers], refs)


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.integers(min_value=200, max_value=3000), st.integers(min_value=6_000, max_value=70_000))
def test_big_runs_are_trimmed_but_keep_headline_and_gating_rows(count: int, budget: int):
    long_name = "x" * 900
    tests = [red_hicache(f"fail-{i}") for i in range(5)]
    tests += [check_result(f"pass-{i}-{long_name}") for i in range(count)]
    comparison = compare(results(*tests), None)
    body = render.comment(comparison, links=LINKS, budget=budget)
    assert len(body) <= budget
    assert "gate failed: 5 failing (no base result)" in body
    for i in range(5):
        assert f"fail-{i}</code>" in body
    # Since the comment's cells got short, 200 passing rows can fit a large budget whole:
    # the trim note is owed exactly when the whole comment would not fit.
    whole = render.comment(comparison, links=LINKS, budget=10_000_000)
    assert ("Trimmed to fit" in body) is (len(whole) > budget)
    assert "[run and job summary]" in body


# --- examples ---------------------------------------------------------------------------


def test_comment_starts_with_the_marker_and_a_sanitised_key():
    comparison = compare(results(check_result("a")), None)
    assert render.comment(comparison, key="Bit-exact (B200)").startswith(
        "<!-- kl-bitexact:Bit-exact (B200) -->\n"
    )
    assert render.marker("evil --> <b>") == "<!-- kl-bitexact:evil -__ _b_ -->"


def test_rows_are_ordered_by_severity():
    tests = (
        check_result("ok"),
        check_result("green", blocked_by=(BLOCKER,)),
        red_hicache("expected", blocked_by=(BLOCKER,)),
        red_hicache("regressed"),
    )
    comparison = compare(results(*tests), None, blockers={BLOCKER: BlockerState.OPEN})
    body = render.comment(comparison)
    order = [
        body.index(f"<code>{name}</code>") for name in ("regressed", "expected", "green", "ok")
    ]
    assert order == sorted(order)
    expected = (
        "expected red until [sgl-project/sglang#\u206029792]"
        "(https://redirect.github.com/sgl-project/sglang/issues/29792) merges - open; "
        "measured 9.53e-05"
    )
    assert expected in body


def test_numbers():
    assert wording.fmt_kl(0.0) == "0"
    assert wording.fmt_kl(-0.0) == "0"
    assert wording.fmt_kl(9.53e-05) == "9.53e-05"
    assert wording.fmt_kl(0.110) == "1.10e-01"
    assert wording.fmt_kl(None) == "-"


def test_cache_hits_cell_shows_the_change_and_details_the_minimum_and_prediction():
    head = results(check_result("a", cache_hits=r.CacheHits(31, 32, 0.99, 32)))
    base = results(check_result("a", cache_hits=r.CacheHits(30, 32, 0.99, 32)))
    body = render.comment(compare(head, base))
    assert "| 30 → 31/32 |" in body  # short: the ratio and prediction wrapped the cell
    assert (
        "cache hits 31/32 hit; the geometry lets up to 32 hit; a pass needs 32 (more than "
        "0.99 of 32)" in body
    )


def test_a_test_green_under_its_own_threshold_shows_its_differing_logprobs_beside():
    """sglang's files pass under 0.02 while a fault moves logprobs (pytest's observer counts
    them): the row says both; in exact mode the test failed and says so as before."""
    loose = check_result(
        "swa-kl",
        kl_div=1.5e-05,
        kl_per_sample=(1.5e-05,) * 32,
        kl_threshold=0.02,
        exact=r.ExactMatch(tokens=216, mismatched=144),
    )
    body = render.comment(compare(results(loose), None))
    # The row in short cells (issue 27), the whole sentence in the test's details.
    assert "| 1.50e-05 | - | 144/216 | 32/32 | ok · under its threshold |" in body
    assert "passed under its threshold 0.02 - 144/216 logprobs differ" in body
    exact = r.ExactMatch(tokens=216, mismatched=144, enforced=True)
    red = check_result("swa-kl", r.Status.FAILED, kl_threshold=0.02, exact=exact)
    assert "passed under" not in render.comment(compare(results(red), None))
    assert "passed under" not in render.comment(compare(results(check_result("ok")), None))


def test_job_summary_has_no_marker_and_a_larger_budget():
    tests = [check_result(f"pass-{i}-{'y' * 200}") for i in range(600)]
    comparison = compare(results(*tests), None)
    summary = render.job_summary(comparison)
    assert not summary.startswith("<!--")
    assert "Trimmed" not in summary and len(summary) > render.COMMENT_LIMIT
    assert "Trimmed" in render.comment(comparison)


def test_the_job_summary_fits_githubs_limit_in_bytes_not_characters():
    # Issue 14, case 9: the budget counted characters; an emoji-heavy summary (4 bytes a
    # character) was 3.79 MB, and GitHub's limit is 1 MiB of the step's summary.
    tests = [red_hicache(f"{n}-{'🔥' * 150}", message="💥" * 300) for n in range(1500)]
    summary = render.job_summary(compare(results(*tests), None))
    assert len(summary.encode("utf-8")) <= render.SUMMARY_LIMIT <= 1024 * 1024
    assert "Trimmed" in summary  # cut to fit, and says so
    assert summary.count("🔥" * 150) > 100  # not cut to nothing either


def test_bidi_and_invisible_characters_reach_no_comment_summary_or_annotation():
    # Issue 14, case 9: U+061C, U+FEFF, tag characters and an RLO in annotations survived.
    sneaky = "t::\u202eevil\u202c\u061c\ufeff\U000e0041\U000e0042"
    head = results(red_hicache(sneaky, message="bad \u202e\u2066news"))
    comparison = compare(head, None)
    rendered = [
        render.comment(comparison),
        render.job_summary(comparison),
        *render.workflow_commands(comparison),
    ]
    for text in rendered:
        assert not [hex(ord(c)) for c in text if hidden(c) and c != escape.WORD_JOINER], text
    assert any("t%3A%3Aevil::bad news" in line for line in rendered[2:]), rendered[2:]


def test_links_from_the_actions_environment():
    env = {
        "GITHUB_SERVER_URL": "https://ghe.example.com",
        "GITHUB_REPOSITORY": "o/r",
        "GITHUB_RUN_ID": "77",
        "KL_BITEXACT_ARTIFACT_URL": "javascript:alert(1)",
    }
    links = render.Links.from_env(env)
    assert links == render.Links("https://ghe.example.com/o/r/actions/runs/77", None)
    assert render.Links.from_env({}) == render.Links()


def test_findings_section():
    finding = Finding(
        "test/registered/a.py", 3, "unlisted-suite", Severity.ERROR, "not allowlisted", "add it"
    )
    body = render.comment(compare(results(check_result("a")), None), findings=[finding])
    assert "| ❌ | <code>test/registered/a.py:3</code> | <code>unlisted-suite</code> |" in body


# --- workflow commands ------------------------------------------------------------------


def test_workflow_commands_escape_and_cap_per_level():
    tests = [red_hicache(f"t{i}: a,b", message=f"50%\nnext {i}") for i in range(12)]
    tests.append(check_result("green", blocked_by=(BLOCKER,)))
    comparison = compare(results(*tests), None, blockers={BLOCKER: BlockerState.MERGED})
    lines = render.workflow_commands(comparison)
    errors = [line for line in lines if line.startswith("::error ")]
    assert len(errors) == render.MAX_ANNOTATIONS
    assert errors[0] == (
        "::error title=kl-bitexact failing (no base result)%3A hicache-mamba t0%3A a%2Cb"
        "::50%25%0Anext 0"
    )
    assert errors[-1].endswith("::3 more tests; see the job summary")
    assert lines[-1].startswith("::notice title=kl-bitexact unblocked (sgl-project/sglang#")
    assert all("\n" not in line for line in lines)


def test_annotations_carry_no_html_mention_or_issue_reference():
    # Issue 30, item 9: raw <img>, <script> and @mentions reached the annotations, which
    # the docs promise carry none.
    hostile = '<img src=x onerror="alert(1)"> ping @octo-org/team and #12 <script>x()</script>'
    head = results(red_hicache(f"t::{hostile}", message=hostile))
    [line] = render.workflow_commands(compare(head, None))
    shown = line.replace("%3A", ":").replace("%2C", ",").replace("%25", "%")
    assert "<" not in shown and ">" not in shown
    assert not MENTION.search(shown) and not ISSUE_REF.search(shown)
    assert "\u2039img src=x" in shown and "@\u2060octo-org/team" in shown  # still readable


# --- JSON -------------------------------------------------------------------------------


def test_json_verdict_for_downstream_steps():
    head = results(red_hicache("a", blocked_by=(BLOCKER,)), check_result("b"))
    comparison = compare(
        head, None, blockers={BLOCKER: BlockerState.OPEN}, policy=Policy(strict=True)
    )
    document = render.as_json(comparison)
    assert document["verdict"] == "passed" and document["exit_code"] == 0
    assert document["baseline"] == {"available": False, "reason": "no baseline given"}
    assert document["counts"] == {"expected_red": 1, "ok": 1}
    assert document["tests"][0]["blocked_by"] == {BLOCKER: "open"}
    assert document["policy"]["strict"] is True


def test_removed_test_row():
    comparison = compare(
        results(check_result("a")), results(check_result("a"), check_result("gone"))
    )
    body = render.comment(comparison)
    assert "| 🗑️ | <code>gone</code> | - | - | - | - | removed |" in body


def test_not_finite_values_do_not_break_the_chart():
    test = structs.replace(red_hicache("a"), kl_per_sample=(float("nan"), 1.0))
    body = render.comment(compare(results(test), None))
    assert "xychart" not in body and "nan" in body


@pytest.mark.parametrize(
    "unsafe",
    [
        "hi @octocat",
        "<img src=x>",
        "see https://evil.example",
        "mail me: a@b.example",
        "<details><summary>x</summary>\n\ny\n\n</details>\n\n</details>",
        "fixes #12",
        "<!-- a --> <!-- b -->",
    ],
)
def test_the_markdown_check_catches_what_escaping_prevents(unsafe: str):
    with pytest.raises(AssertionError):
        assert_renders_safely(unsafe, links=[])


def test_a_test_red_on_both_sides_is_never_called_a_regression():
    # Issue 20: "gate passed" beside "2 regressions" when the base was red too.
    head = results(red_hicache("a"), red_hicache("b"), check_result("c"))
    comparison = compare(head, head)
    body = render.comment(comparison)
    verdict = render.as_json(comparison)
    assert "gate passed" in body and "regression" not in body.replace(
        "Gate fails on regression", ""
    )
    assert "🟤 2 still failing (red on base too)" in body
    assert verdict["counts"] == {"still_failing": 2, "ok": 1}
    assert {t["verdict"] for t in verdict["tests"]} == {"still_failing", "ok"}


@pytest.mark.parametrize("state", list(BlockerState))
def test_blocker_references_are_shown_but_never_linked(state):
    # Issue 14, case 8: canonical references were written plainly, so GitHub linked each
    # and recorded a cross-reference on the other project's issue (the PR chose which).
    refs = ("other-org/repo#1", "https://github.com/far/away/pull/5", "#7")
    head = results(
        red_hicache("t::red", blocked_by=refs), check_result("t::green", blocked_by=refs)
    )
    states = {"other-org/repo#1": state, "far/away#5": state, "o/r#7": state}
    comparison = compare(head, None, blockers=states, default_repo="o/r")
    for text in (render.comment(comparison), render.job_summary(comparison)):
        seen = html.unescape(text)
        assert not ISSUE_REF.search(seen), seen
        shown = seen.replace(escape.WORD_JOINER, "")
        assert all(ref in shown for ref in ("other-org/repo#1", "far/away#5", "o/r#7")), shown


def test_repeats_lists_of_unequal_lengths_render_with_gaps_not_a_crash():
    # A results file from elsewhere: the schema cannot say the three lists are one per
    # repeat (a zip(strict=True) ended `report` with an internal error; tests/test_fuzz.py).
    uneven = r.Repeats(count=3, kl=(0.0, 1e-9, None), statuses=(r.Status.PASSED,))
    flaky = check_result("t::flaky", r.Status.FLAKY, repeats=uneven)
    body = render.comment(compare(results(flaky), None))
    assert "| 1 | passed | 0 | - |" in body and "| 3 | - | - | - |" in body
