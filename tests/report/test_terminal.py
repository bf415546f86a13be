"""The lines `run` ends with: one per test that did not pass, plain text on one line."""

from __future__ import annotations

from kl_bitexact.report.terminal import MAX_REASON, not_passed_lines
from kl_bitexact.results.model import (
    Divergence,
    Results,
    ServerInfo,
    Status,
    SuiteResult,
    TestResult,
)


def _results(*tests: TestResult) -> Results:
    return Results(suites=(SuiteResult("s", ServerInfo("sglang"), tests),))


def test_passed_and_skipped_tests_get_no_line():
    results = _results(
        TestResult("s::a", "match", Status.PASSED), TestResult("s::b", "match", Status.SKIPPED)
    )
    assert not_passed_lines(results) == []


def test_a_divergence_without_cached_tokens_says_they_were_not_reported():
    first = Divergence(sample=2, token_index=7, hint="diverges at position 90")
    second = Divergence(sample=5, token_index=1, hint="diverges at position 60")
    test = TestResult("s::a", "match", Status.FAILED, first_divergence=(first, second))
    assert not_passed_lines(_results(test)) == [
        "  FAILED   s::a: first divergence in sample 2 at decoded token 7; diverges at "
        "position 90; cached tokens not reported by the server; 1 more differing sample"
    ]


def test_a_divergence_without_hint_names_its_cached_tokens():
    first = Divergence(sample=0, token_index=0, cached_tokens=64)
    test = TestResult("s::a", "match", Status.FAILED, first_divergence=(first,))
    [line] = not_passed_lines(_results(test))
    assert line.endswith("at decoded token 0; 64 cached tokens")


def test_a_server_s_message_becomes_one_bounded_line_without_escape_sequences():
    message = "boom\x1b[2J\x07cleared" + "x" * 5000 + "\nsecond line"
    test = TestResult("s::a", "match", Status.ERROR, message=message)
    [line] = not_passed_lines(_results(test))
    assert "\x1b" not in line and "\x07" not in line and "second line" not in line
    assert line.startswith("  ERROR    s::a: boom clearedxxx")
    assert len(line) <= len("  ERROR    s::a: ") + MAX_REASON


def test_a_test_without_message_or_divergence_names_its_status():
    test = TestResult("s::a", "match", Status.NOT_RUN)
    assert not_passed_lines(_results(test)) == ["  NOT_RUN  s::a: not_run"]


def test_tests_that_did_not_pass_for_one_reason_share_a_line():
    # A server that did not start: one line for its tests, not one each (issue 27).
    down = "suite s: the server exited with code 2: error: unrecognized arguments: --x"
    tests = [TestResult(f"s::{n}", "match", Status.ERROR, message=down) for n in "abc"]
    other = TestResult("s::d", "match", Status.ERROR, message="the server refused the request")
    assert not_passed_lines(_results(*tests, other)) == [
        f"  ERROR    s::a and 2 more: {down}",
        "  ERROR    s::d: the server refused the request",
    ]
