"""The lines `run` ends with: one per test that is not ok, in its state's words, plain text
on one line, and a last line that says why the exit code is not 0."""

from __future__ import annotations

from kl_bitexact.compare.comparison import compare
from kl_bitexact.compare.gate import Policy
from kl_bitexact.errors import ExitCode
from kl_bitexact.report import terminal
from kl_bitexact.report.terminal import MAX_REASON
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


def _green(test_id: str, blocked_by: tuple[str, ...] = ()) -> TestResult:
    """A pass its numbers back (a pass without them proves nothing: results.verdict)."""
    return TestResult(
        test_id, "match", Status.PASSED, kl_div=0.0, kl_threshold=1e-9, blocked_by=blocked_by
    )


def not_passed_lines(results: Results) -> list[str]:
    return terminal.aligned(terminal.not_passed_lines(compare(results, None)))


def test_passed_and_skipped_tests_get_no_line():
    results = _results(_green("s::a"), TestResult("s::b", "match", Status.SKIPPED))
    assert not_passed_lines(results) == []


def test_a_divergence_without_cached_tokens_says_they_were_not_reported():
    first = Divergence(sample=2, token_index=7, hint="diverges at position 90")
    second = Divergence(sample=5, token_index=1, hint="diverges at position 60")
    test = TestResult("s::a", "match", Status.FAILED, first_divergence=(first, second))
    assert not_passed_lines(_results(test)) == [
        "  failing (no base result)  s::a: first divergence in sample 2 at decoded token 7; "
        "diverges at position 90; cached tokens not reported by the server; 1 more differing sample"
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
    assert line.startswith("  could not run  s::a: boom clearedxxx")
    assert len(line) <= len("  could not run  s::a: ") + MAX_REASON


def test_a_test_without_message_or_divergence_names_its_status():
    test = TestResult("s::a", "match", Status.NOT_RUN)
    assert not_passed_lines(_results(test)) == ["  did not measure  s::a: not_run"]


def test_tests_that_did_not_pass_for_one_reason_share_a_line():
    # A server that did not start: one line for its tests, not one each (issue 27).
    down = "suite s: the server exited with code 2: error: unrecognized arguments: --x"
    tests = [TestResult(f"s::{n}", "match", Status.ERROR, message=down) for n in "abc"]
    other = TestResult("s::d", "match", Status.ERROR, message="the server refused the request")
    assert not_passed_lines(_results(*tests, other)) == [
        f"  could not run  s::a and 2 more tests: {down}",
        "  could not run  s::d: the server refused the request",
    ]


def test_states_of_different_lengths_are_aligned_in_one_column():
    red = TestResult("s::red", "match", Status.FAILED, message="avg KL 1e-3 >= threshold 0")
    down = TestResult("s::down", "match", Status.ERROR, message="no server")
    lines = not_passed_lines(_results(red, down))
    assert [line.index("s::") for line in lines] == [len("  failing (no base result)  ")] * 2


def test_a_blocked_green_test_says_its_blocker_and_the_exit_line_why_it_gates():
    # Issue 37: `run` exited 1 printing "1 passed" and nothing about why.
    green = _green("s::a", blocked_by=("o/r#7",))
    comparison = compare(_results(green), None)
    [line] = terminal.aligned(terminal.not_passed_lines(comparison))
    assert line.startswith("  blocker unknown (blocked by o/r#7)  s::a")
    code = comparison.decision.exit_code
    assert code is ExitCode.GATE_FAILED
    assert terminal.exit_line(comparison, code) == (
        "kl-bitexact: exit 1, gate failed: 1 blocker unknown (s::a) (--fail-on regression)"
    )


def test_exit_0_has_no_exit_line_and_the_tally_counts_in_state_words():
    tests = [_green(f"s::{n}") for n in "ab"]
    comparison = compare(_results(*tests), None, policy=Policy())
    assert terminal.exit_line(comparison, ExitCode.GATE_PASSED) is None
    assert terminal.tally(comparison) == "2 ok"
