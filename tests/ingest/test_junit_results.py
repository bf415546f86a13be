"""Converting JUnit cases into results: statuses, node ids, recorded metrics, blockers."""

from __future__ import annotations

import json

import pytest

from kl_bitexact.errors import ConfigError
from kl_bitexact.ingest import properties as prop
from kl_bitexact.ingest.junit import JUnitCase, Outcome
from kl_bitexact.ingest.junit_results import Options, node_id, to_results, to_test
from kl_bitexact.results import io as results_io
from kl_bitexact.results import model as results
from kl_bitexact.results.model import RunInfo, Status


def case(outcome=Outcome.PASSED, out="", message="", properties=(), **fields) -> JUnitCase:
    defaults = dict(classname="dir.test_kl.TestKL", name="test_a", file=None, time_s=2.0)
    return JUnitCase(
        outcome=outcome,
        message=message,
        details="",
        system_out=out,
        system_err="",
        properties=tuple(properties),
        **{**defaults, **fields},
    )


@pytest.mark.parametrize(
    ("outcome", "status"),
    [
        (Outcome.PASSED, Status.PASSED),
        (Outcome.FAILED, Status.FAILED),
        (Outcome.ERROR, Status.ERROR),
        (Outcome.SKIPPED, Status.SKIPPED),
        (Outcome.XFAIL, Status.SKIPPED),
    ],
)
def test_status_mapping(outcome, status):
    test = to_test(case(outcome, message="why"), Options())
    assert test.status is status
    assert test.duration_s == 2.0
    expected = (
        "" if status is Status.PASSED else "xfail: why" if outcome is Outcome.XFAIL else "why"
    )
    assert test.message == expected


def test_xpass_is_a_pass_with_a_warning():
    properties = [(prop.XFAIL_REASON, "waits for #7"), (prop.OUTCOME, "xpass")]
    test = to_test(case(properties=properties), Options())
    assert test.status is Status.PASSED
    assert test.warnings == ("xpass: marked xfail (waits for #7) but passed; remove the marker",)


def test_radix_cache_disabled_is_not_run_never_passed():
    test = to_test(case(out="Radix cache is disabled, skipping test\n"), Options())
    assert test.status is Status.NOT_RUN
    assert test.kl_div is None and test.kl_per_sample is None and test.cache_hits is None


@pytest.mark.parametrize(
    ("name", "check"),
    [
        ("test_input_output_logprobs_match_decode_cache_hit", "decode_cache_hit"),
        ("test_input_output_logprobs_match_prefill_cache_hit", "prefill_cache_hit"),
        ("test_something", "pytest"),
    ],
)
def test_the_radix_skip_line_is_recorded_under_the_check_that_printed_it(name, check):
    """sglang 0.5's line names no helper; the test (named after it) does."""
    out = "Radix cache is disabled, skipping test\n"
    test = to_test(case(out=out, name=name), Options())
    assert (test.check, test.status) == (check, Status.NOT_RUN)
    assert "radix cache is disabled" in test.message


def test_recovered_metrics_and_ratio_option():
    out = (
        "Running test_input_output_logprobs_match_prefill_cache_hit with 4 prompts\n"
        "Prefill cache miss for prompt 1, skipping\n"
        "kl_divs=[0.0, 0.0, 0.0]\navg_kl_div=0.0\nACC_THRESHOLDS={'kl_div': 1e-09}\n"
    )
    test = to_test(case(out=out), Options(min_cache_hit_ratio=0.9))
    assert test.check == "prefill_cache_hit"
    assert (test.kl_div, test.kl_threshold, test.kl_per_sample) == (0.0, 1e-09, (0.0, 0.0, 0.0))
    assert test.cache_hits == results.CacheHits(hit=3, total=4, min_ratio=0.9)


def test_a_test_without_kl_lines_has_no_metrics():
    test = to_test(case(out="hello\n"), Options())
    assert test.check == "pytest"
    assert test.kl_div is None and test.cache_hits is None and test.kl_per_sample is None


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"file": "dir/test_kl.py"}, "dir/test_kl.py::TestKL::test_a"),
        ({}, "dir/test_kl.py::TestKL::test_a"),
        ({"classname": "test_kl"}, "test_kl.py::test_a"),
        (
            {"classname": "a.b.test_kl.TestKL.Inner", "file": "a/b/test_kl.py"},
            "a/b/test_kl.py::TestKL::Inner::test_a",
        ),
    ],
)
def test_node_id_rebuilt_from_classname(fields, expected):
    assert node_id(case(**fields)) == expected


def test_node_id_property_wins():
    assert node_id(case(properties=[(prop.NODEID, "x.py::t[1.5]")])) == "x.py::t[1.5]"


def recorded(**fields) -> tuple[str, str]:
    test = {"id": "ignored", "check": "decode_cache_hit", "status": "passed", **fields}
    return (prop.RESULT, json.dumps(test))


def test_recorded_result_is_used_as_written():
    hits = {"hit": 31, "total": 32, "min_ratio": 0.9, "expected": 32}
    properties = [recorded(kl_div=0.0, cache_hits=hits, exact={"tokens": 64, "mismatched": 0})]
    test = to_test(case(properties=properties), Options())
    assert test.id == "dir/test_kl.py::TestKL::test_a"
    assert test.cache_hits == results.CacheHits(31, 32, 0.9, 32)
    assert test.exact == results.ExactMatch(64, 0)
    assert test.status is Status.PASSED


@pytest.mark.parametrize(
    ("outcome", "measured", "final"),
    [
        (Outcome.PASSED, "not_run", Status.NOT_RUN),
        (Outcome.PASSED, "failed", Status.FAILED),
        (Outcome.FAILED, "passed", Status.FAILED),
        (Outcome.SKIPPED, "not_run", Status.NOT_RUN),
        (Outcome.ERROR, "not_run", Status.ERROR),
        (Outcome.FAILED, "error", Status.ERROR),
    ],
)
def test_pytest_red_wins_and_a_vacuous_measurement_never_passes(outcome, measured, final):
    test = to_test(case(outcome, properties=[recorded(status=measured)]), Options())
    assert test.status is final


def test_recorded_result_is_validated():
    with pytest.raises(ConfigError, match="invalid results at suites/0/tests/0"):
        to_test(case(properties=[recorded(kl_div="big")]), Options())
    with pytest.raises(ConfigError, match="is not JSON"):
        to_test(case(properties=[(prop.RESULT, "{")]), Options())
    # Past Python's recursion limit: was a RecursionError, an internal error (issue 30).
    with pytest.raises(ConfigError, match="nested more than 64 levels deep"):
        to_test(case(properties=[(prop.RESULT, "[" * 100_000 + "]" * 100_000)]), Options())


def test_blocked_by_from_marker_property():
    properties = [(prop.BLOCKED_BY, json.dumps(["sgl-project/sglang#29792"]))]
    test = to_test(case(Outcome.FAILED, properties=properties), Options())
    assert test.blocked_by == ("sgl-project/sglang#29792",)


def test_suites_group_by_registration_else_file():
    cases = [
        case(name="a"),
        case(name="b", properties=[(prop.SUITE, "stage-b-test-1-gpu")]),
        case(name="c", properties=[(prop.SERVER, json.dumps({"engine": "reference"}))]),
    ]
    document = to_results(cases, RunInfo(), Options())
    by_name = {suite.name: suite for suite in document.suites}
    assert [t.id.rsplit("::", 1)[1] for t in by_name["dir/test_kl.py"].tests] == ["a", "c"]
    assert by_name["dir/test_kl.py"].server.engine == "unknown"
    assert by_name["stage-b-test-1-gpu"].tests[0].id.endswith("::b")
    results_io.from_json(results_io.to_json(document))  # a valid results.json


def test_log_output_fills_in_for_uncaptured_tests():
    log = {"dir/test_kl.py::TestKL::test_a": "kl_divs=[0.5]\navg_kl_div=0.5\n"}
    test = to_test(case(), Options(log_output=log))
    assert test.kl_div == 0.5


@pytest.mark.parametrize(
    "outcomes",
    [(Outcome.FAILED, Outcome.PASSED), (Outcome.PASSED, Outcome.FAILED)],
    ids=["fail-then-pass", "pass-then-fail"],
)
def test_a_node_id_reported_twice_keeps_both_reports_apart(outcomes):
    # Issue 14, case 9: the last report won, so a failure followed by a pass imported as a
    # pass. Each report is its own test now; the red one gates whatever the order.
    document = to_results([case(outcome) for outcome in outcomes], RunInfo(), Options())
    tests = [test for _, test in document.all_tests()]
    first = "dir/test_kl.py::TestKL::test_a"
    assert [t.id for t in tests] == [first, f"{first} (report 2)"]
    assert [t.status for t in tests] == [Status(o.value) for o in outcomes]
    assert all("reported 2 times" in t.warnings[-1] for t in tests)
    results_io.from_json(results_io.to_json(document))  # ids unique: a valid results.json


def test_a_made_up_id_never_collides_with_a_real_one():
    cases = [case(), case(), case(name="test_a (report 2)", classname="dir.test_kl.TestKL")]
    ids = [test.id for _, test in to_results(cases, RunInfo(), Options()).all_tests()]
    assert len(set(ids)) == 3, ids


FAIL_THEN_PASS = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="2">
<testcase classname="test_kl.TestKL" name="test_a" file="test_kl.py" time="1.0">
<failure message="AssertionError: avg KL 5.0">kl_divs=[5.0]</failure></testcase>
<testcase classname="test_kl.TestKL" name="test_a" file="test_kl.py" time="1.0"/>
</testsuite></testsuites>
"""


def test_an_imported_fail_then_pass_fails_the_gate(cli, tmp_path):
    xml = tmp_path / "junit.xml"
    xml.write_text(FAIL_THEN_PASS)
    imported = cli(["import-junit", str(xml), "--out", str(tmp_path / "out")])
    assert imported.returncode == 1, imported.stdout + imported.stderr
    report = cli(["report", str(tmp_path / "out" / "results.json")])
    assert report.returncode == 1 and "gate failed" in report.stdout


KL_PRINTED = (
    "Running test_input_output_logprobs_match_decode_cache_hit with 2 prompts\n"
    "kl_divs=[0.0, 0.0]\navg_kl_div=0.0\n"
)


@pytest.mark.parametrize(
    ("observed", "why"),
    [
        (
            {"exact": None, "first_divergence": [], "samples": 0, "generated": 5, "warnings": []},
            "no decode was replayed through `requests`",
        ),
        (None, "the run was not observed"),
    ],
    ids=["nothing-paired", "not-observed"],
)
def test_a_kl_check_without_an_exact_count_says_so(observed, why):
    """Issue 38: helpers the observer cannot follow gave a silent null exact count."""
    properties = [] if observed is None else [(prop.OBSERVED, json.dumps(observed))]
    test = to_test(case(out=KL_PRINTED, properties=properties), Options())
    assert test.check == "decode_cache_hit" and test.exact is None
    [warning] = test.warnings
    assert warning.startswith(f"no exact signal observed: {why}")
    if observed is not None:
        assert warning.endswith("(5 /generate answer(s) read)")
    plain = to_test(case(properties=properties), Options())
    assert plain.check == "pytest" and plain.warnings == ()
