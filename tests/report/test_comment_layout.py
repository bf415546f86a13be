"""The comment built for the reviewer (issue 27, items 1 and 5).

Measured on the rendered comment at 1000 px (scripts/readme_media.py --comment): numbers and
names wrapped mid-token ("3.39e-/05", "9/9 (min/0.99,/predicted/9)"), the status cell
repeated itself ("regression · failed · regressed · gates the merge"), first-divergence
tables printed 17-digit logprobs and the same hint, cut mid-word, on every row, the KL chart
had no threshold and an axis from wherever mermaid liked, the Server line showed the
runner's interpreter path, and a Warnings section was taller than the failure. A could-not-run
run read as eight regressions.
"""

from __future__ import annotations

from golden_scenarios import check_result, red_hicache, results
from msgspec import structs

from kl_bitexact.compare.comparison import compare
from kl_bitexact.report import render
from kl_bitexact.results import model as r

LONG_HINT = (
    "diverges at position 168 (the first decoded token: the cause may be earlier); +24 "
    "from the end of the restored prefix (144 cached); 8 after the page boundary at 160 "
    "(page size 16); 8 after the checkpoint boundary at 160 (checkpoint size 16)"
)


def comment(head: r.Results, base: r.Results | None = None) -> str:
    return render.comment(compare(head, base), budget=None)


def rows(body: str, first_cell: str) -> list[list[str]]:
    return [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in body.splitlines()
        if line.startswith(f"| {first_cell}")
    ]


def test_a_regression_row_says_it_once_in_short_cells():
    body = comment(results(red_hicache("t")), results(check_result("t")))
    [row] = rows(body, "🔴")
    assert row[-1] == "**regression**"  # was "**regression** · failed · regressed · gates ..."
    assert "**Bold** status: gates the merge." in body
    # Every cell but the test id fits in a few words: nothing for a browser to wrap.
    assert all(len(cell) <= 24 for cell in row[:1] + row[2:]), row
    assert row[2:6] == ["9.53e-05", "+9.53e-05", "0 → 1040/4096", "32/32"]
    # A one-line message wraps as a paragraph; a <pre> of it scrolled sideways.
    assert "\navg KL 9.53e-05 &gt;= threshold 1e-09\n" in body and "<pre>avg KL" not in body


def test_first_divergences_show_6_digits_the_difference_and_the_hint_once_uncut():
    divergences = tuple(
        r.Divergence(i, 0, 144, -3.1128473281860352, -3.099566698074341, LONG_HINT + f" {i}")
        for i in range(6)
    )
    body = comment(results(red_hicache("t", first_divergence=divergences)))
    [first, *_] = rows(body, "0 | 0")
    assert first[3:] == ["-3.11285", "-3.09957", "+1.33e-02"]
    # Once in its details (not per row), and once in the reason above them (issue 37).
    assert body.count("after the page boundary") == 2
    assert "Sample 0: " + LONG_HINT.replace("_", "&#95;") + " 0\n" in body  # not cut


def test_the_chart_starts_at_zero_draws_the_threshold_and_names_its_unit():
    per_sample = (0.0, 3.04e-05, 2.72e-05, 0.0, 1.06e-04)
    test = red_hicache("t", kl_per_sample=per_sample, kl_threshold=1e-5)
    chart = comment(results(test)).split("```mermaid\n", 1)[1].split("```", 1)[0]
    assert 'y-axis "KL (10⁻⁴)" 0 --> ' in chart
    assert "  bar [0.000, 0.304, 0.272, 0.000, 1.060]" in chart
    assert "  line [0.100, 0.100, 0.100, 0.100, 0.100]" in chart


def test_no_path_from_the_runners_disk():
    head = results(red_hicache("t"))
    server = r.ServerInfo("reference", ("/home/runner/work/_tool/python3", "-m", "x", "--p", "4"))
    head = structs.replace(head, suites=(structs.replace(head.suites[0], server=server),))
    body = comment(head)
    assert "/home/runner" not in body and "…/python3 -m x --p 4" in body


def test_the_server_line_says_which_build_and_backend_ran_escaped():
    head = results(red_hicache("t"))
    server = r.ServerInfo("openai", (), version="b6123", build="<b>abc</b> @team", backend="CUDA0")
    head = structs.replace(head, suites=(structs.replace(head.suites[0], server=server),))
    [line] = [line for line in comment(head).splitlines() if line.startswith("Server:")]
    assert line.startswith("Server: <code>openai</code> · version <code>b6123</code> · "), line
    assert line.endswith(" · backend <code>CUDA0</code>"), line
    assert "<b>" not in line and "@team" not in line, line  # escaped, mention broken
    quiet = results(red_hicache("t"))
    assert "backend" not in comment(quiet)


def test_warnings_are_folded_under_their_test():
    warned = check_result("t", warnings=("cache budget: raise --max-total-tokens",))
    body = comment(results(red_hicache("red"), warned))
    assert "### Warnings" not in body
    details = body.split("#### t\n", 1)[1]
    assert details.index("<summary>1 warning</summary>") < details.index("cache budget")


def test_a_refused_server_is_named_once_as_the_runners_not_eight_regressions():
    message = "the server at http://127.0.0.1:9 refused connections"
    errors = [
        check_result(f"s::t{i}", r.Status.ERROR, message=message, cause=r.Cause.RUNNER)
        for i in range(8)
    ]
    body = comment(results(*errors), results(*(check_result(f"s::t{i}") for i in range(8))))
    headline = body.splitlines()[1]
    # Issue 37: one short line with a blocking icon; the cause once, the tests as one row.
    assert headline.startswith("## ⛔ kl-bitexact: could not run: the server at http:")
    assert headline.endswith("refused connections (8 tests)")
    [cause] = [line for line in body.splitlines() if line.startswith("🔌 **8 tests could not")]
    assert cause.endswith("this is the runner, not the change.  ")
    assert body.count("**What to do:**") == 1 and body.count("refused connections") == 2
    assert "regressed" not in body and "**regression**" not in body
    [row] = rows(body, "🔌")
    assert row[1].startswith("8 tests: ") and row[-1] == "**could not run**"


def test_an_interrupted_run_says_so_once_beside_the_regression_it_did_find():
    stopped = [
        r.TestResult(
            id=f"s::t{i}",
            check="multiturn",
            status=r.Status.ERROR,
            message="interrupted: SIGINT before this test finished",
            cause=r.Cause.RUNNER,
        )
        for i in range(3)
    ]
    head = structs.replace(results(red_hicache("s::red"), *stopped), run=r.RunInfo())
    body = comment(head, results(check_result("s::red"), *(check_result(t.id) for t in stopped)))
    assert body.splitlines()[1] == (
        "## ⛔ kl-bitexact: gate failed, run incomplete: 1 regression, 3 could not run"
    )
    [line] = [x for x in body.splitlines() if x.startswith("🔌 **3 tests could not run**")]
    assert "the run was interrupted (SIGINT); this is the runner, not the change" in line
    assert "**What to do:** run the job again" in body
    assert "Against base: 1 newly red · 3 newly not run" in body


def test_the_flaky_policy_is_said_where_a_flaky_test_does_not_gate():
    evidence = r.Repeats(count=3, positions=24, changed=5, statuses=(r.Status.PASSED,) * 3)
    flaky = check_result("t", r.Status.FLAKY, repeats=evidence)
    body = comment(results(flaky))
    assert "gate passed" in body.splitlines()[1]
    assert "a flaky test gates only if a repeat was red (always with ,flaky)" in body
