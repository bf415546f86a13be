"""Splitting a console log into per-test segments by the lines pytest and unittest print."""

from __future__ import annotations

from kl_bitexact.ingest.log_split import split_log

IDS = ["t/test_kl.py::TestKL::test_match", "t/test_kl.py::TestKL::test_decode"]


def test_pytest_verbose_with_no_capture():
    log = (
        "t/test_kl.py::TestKL::test_match launching\nkl_divs=[0.0]\nPASSED\n"
        "t/test_kl.py::TestKL::test_decode kl_divs=[0.5]\nFAILED\n"
        "=========================== short test summary info ===\n"
        "FAILED t/test_kl.py::TestKL::test_decode - AssertionError: "
        "Too few decode cache hits: 1/4\n"
    )
    segments = split_log(log, IDS)
    assert segments[IDS[0]] == " launching\nkl_divs=[0.0]\nPASSED"
    assert "kl_divs=[0.5]" in segments[IDS[1]]
    assert "Too few decode cache hits: 1/4" in segments[IDS[1]]
    assert "Too few" not in segments[IDS[0]]


def test_pytest_failure_sections():
    log = (
        "================================= FAILURES =================================\n"
        "_______________________________ TestKL.test_decode _______________________________\n"
        "E   AssertionError: Too few decode cache hits: 2/4\n"
        "----------------------------- Captured stdout call -----------------------------\n"
        "Running test_input_output_logprobs_match_decode_cache_hit with 4 prompts\n"
    )
    segments = split_log(log, IDS)
    assert list(segments) == [IDS[1]]
    assert "2/4" in segments[IDS[1]] and "with 4 prompts" in segments[IDS[1]]


def test_unittest_verbose_both_python_wordings():
    log = (
        "setting up the server\n"
        "test_decode (test_kl.TestKL.test_decode) ... kl_divs=[0.25]\nok\n"
        "test_match (t.test_kl.TestKL) ... kl_divs=[0.0]\nok\n"
        "======================================================================\n"
        "FAIL: test_decode (test_kl.TestKL.test_decode)\n"
        "AssertionError: avg_kl_div=0.25 > threshold=0.001 for m h\n"
    )
    segments = split_log(log, IDS)
    assert segments[IDS[0]] == " kl_divs=[0.0]\nok\n" + "=" * 70
    assert segments[IDS[1]].startswith(" kl_divs=[0.25]")
    assert "threshold=0.001" in segments[IDS[1]]


def test_lines_before_any_test_belong_to_none():
    assert split_log("hello\nworld\n", IDS) == {}
