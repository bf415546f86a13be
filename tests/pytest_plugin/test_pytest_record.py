"""What the plugin's recorder writes, and that the importer reads it back unchanged."""

from __future__ import annotations

import json

from kl_bitexact.ingest import properties as prop
from kl_bitexact.ingest.junit import JUnitCase, Outcome
from kl_bitexact.ingest.junit_results import Options, to_test
from kl_bitexact.pytest_plugin.record import Recorder
from kl_bitexact.results.model import CacheHits, ExactMatch, ServerInfo, Status, TestResult


def imported(recorder: Recorder, outcome: Outcome = Outcome.PASSED) -> TestResult:
    properties = [(name, str(value)) for name, value in recorder.properties()]
    case = JUnitCase(
        "t.test_x", "test_a", "t/test_x.py", 1.0, outcome, "", "", "", "", tuple(properties)
    )
    return to_test(case, Options())


def test_nothing_recorded_writes_nothing():
    assert Recorder().properties() == []


def test_recorded_metrics_round_trip():
    recorder = Recorder()
    recorder.check("decode_cache_hit")
    recorder.kl_div(0.0, threshold=1e-9, per_sample=(0.0, 0.0))
    recorder.cache_hits(31, 32, min_ratio=0.9, expected=32)
    recorder.exact(512, 0)
    test = imported(recorder)
    assert (test.id, test.check, test.status) == (
        "t/test_x.py::test_a",
        "decode_cache_hit",
        Status.PASSED,
    )
    assert (test.kl_div, test.kl_threshold, test.kl_per_sample) == (0.0, 1e-9, (0.0, 0.0))
    assert test.cache_hits == CacheHits(31, 32, 0.9, 32)
    assert test.exact == ExactMatch(512, 0)


def test_a_recorded_failure_is_not_a_pass_even_without_an_assert():
    over = Recorder()
    over.kl_div(2e-9, threshold=1e-9)
    assert imported(over).status is Status.FAILED
    few = Recorder()
    few.cache_hits(16, 32, min_ratio=0.5)
    assert imported(few).status is Status.FAILED


def test_a_whole_check_result_and_its_server():
    recorder = Recorder()
    result = TestResult(id="x", check="match", status=Status.NOT_RUN, message="cache disabled")
    recorder.result(result, ServerInfo("reference", ("--page-size", "4"), 0.5))
    properties = dict(recorder.properties())
    assert json.loads(str(properties[prop.SERVER])) == {
        "engine": "reference",
        "args": ["--page-size", "4"],
        "launch_s": 0.5,
    }
    test = imported(recorder)
    assert (test.status, test.message) == (Status.NOT_RUN, "cache disabled")


def test_impossible_recorded_numbers_are_an_error_by_the_same_rule_as_the_gate():
    # Issue 27, item 2: the recorder judged by its own copy of the rule, which knew neither
    # impossible numbers nor exact mode; it now calls results.verdict like run and report.
    nine = Recorder()
    nine.cache_hits(9, 8, min_ratio=0.5)
    assert imported(nine).status is Status.ERROR
    assert "9 cache hits of 8 samples" in imported(nine).message
    negative = Recorder()
    negative.kl_div(-1e300, threshold=1e-9)
    assert imported(negative).status is Status.ERROR
    nothing = Recorder()
    nothing.exact(0, 0)
    assert imported(nothing).status is Status.ERROR
