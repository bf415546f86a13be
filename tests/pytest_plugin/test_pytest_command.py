"""`kl-bitexact pytest` and `import-junit` as a user runs them, on the fixture suites."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kl_bitexact.results import io as results_io
from kl_bitexact.results import model as results

SUITES = Path(__file__).parents[1] / "fixtures" / "pytest_suites"


def run_pytest(cli, out: Path, *pytest_args: str) -> subprocess.CompletedProcess[str]:
    return cli(["pytest", "--out", str(out), "--", *pytest_args], cwd=SUITES)


def results_by_name(out: Path) -> dict[str, results.TestResult]:
    loaded = results_io.load(out / "results.json")
    return {test.id.rsplit("::", 1)[1]: test for _, test in loaded.all_tests()}


@pytest.fixture(scope="module")
def printed_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """One `kl-bitexact pytest` run of the printed-lines suite, shared by several tests."""
    out = tmp_path_factory.mktemp("printed")
    command = ["pytest", "--out", str(out), "--", "sglang_style/test_printed_kl.py"]
    done = subprocess.run(
        [sys.executable, "-m", "kl_bitexact", *command],
        cwd=SUITES,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return out, done


def test_sglang_style_suite_metrics_are_recovered(printed_run):
    tmp_path, done = printed_run
    assert done.returncode == 1, done.stderr
    assert "failed   sglang_style/test_printed_kl.py::TestPrintedKL::test_kl_over_threshold" in (
        done.stdout
    )
    tests = results_by_name(tmp_path)
    exact = tests["test_bit_exact"]
    assert (exact.status, exact.check, exact.kl_div, exact.kl_per_sample) == (
        results.Status.PASSED,
        "match",
        0.0,
        (0.0, 0.0),
    )
    over = tests["test_kl_over_threshold"]
    assert over.status is results.Status.FAILED
    assert over.kl_div == pytest.approx(0.1276259652063808)
    assert over.kl_threshold == 0.002
    assert over.kl_per_sample is not None and len(over.kl_per_sample) == 2
    assert over.message.startswith("AssertionError: avg_kl_div=0.127")
    hits = tests["test_prefill_hits_with_misses"]
    assert (hits.status, hits.cache_hits) == (
        results.Status.PASSED,
        results.CacheHits(hit=30, total=32, min_ratio=0.5),
    )
    too_few = tests["test_too_few_decode_hits"]
    assert (too_few.status, too_few.check, too_few.cache_hits) == (
        results.Status.FAILED,
        "decode_cache_hit",
        results.CacheHits(hit=16, total=32, min_ratio=0.5),
    )
    assert too_few.kl_div is None  # never printed, so absent, not zero
    assert tests["test_known_drift"].status is results.Status.SKIPPED
    assert tests["test_known_drift"].message.startswith("xfail")
    assert tests["test_no_kl_lines"].check == "pytest"
    assert (tmp_path / "logs" / "pytest.log").read_text().count("FAILED") >= 2


def test_unedited_file_still_runs_as_sglang_ci_runs_it():
    done = subprocess.run(
        [sys.executable, "sglang_style/test_printed_kl.py"],
        cwd=SUITES,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert "FAILED (failures=2, expected failures=1)" in done.stderr


def test_plugin_markers_reach_results(cli, tmp_path):
    done = cli(
        ["pytest", "--out", str(tmp_path), "--", "plugin_style/test_markers.py"],
        cwd=SUITES,
        env={"GITHUB_REPOSITORY": ""},  # `#N` stays as written when no repository is known
    )
    assert done.returncode == 1, done.stderr
    loaded = results_io.load(tmp_path / "results.json")
    names = {
        suite.name: [test.id.rsplit("::", 1)[1] for test in suite.tests] for suite in loaded.suites
    }
    assert names == {
        "extra-b-test-4-gpu-b200": [
            "test_red_until_29792_merges",
            "test_blocked_by_two",
            "test_unexpectedly_green",
        ],
        "stage-b-test-1-gpu": ["test_disabled"],
    }
    tests = results_by_name(tmp_path)
    assert tests["test_red_until_29792_merges"].blocked_by == ("sgl-project/sglang#29792",)
    assert tests["test_red_until_29792_merges"].kl_threshold == 1e-09
    assert tests["test_blocked_by_two"].blocked_by == ("#35293", "sgl-project/sglang#34405")
    assert tests["test_blocked_by_two"].cache_hits == results.CacheHits(16, 32, 0.5)
    assert tests["test_unexpectedly_green"].warnings[0].startswith("xpass")
    assert tests["test_disabled"].message == "disabled: see #14021"


def test_pytest_usage_error_is_exit_2(cli, tmp_path):
    done = run_pytest(cli, tmp_path, "--no-such-flag")
    assert done.returncode == 2
    assert "pytest stopped with a usage error (exit 4): unrecognized arguments: --no-such-flag" in (
        done.stderr
    )
    assert "Traceback" not in done.stderr


def test_a_malformed_blocked_by_marker_names_the_test(cli, tmp_path):
    (tmp_path / "test_bad.py").write_text(
        "import pytest\n\n\n@pytest.mark.blocked_by('sglang 29792')\ndef test_x():\n    pass\n"
    )
    done = cli(["pytest", "--out", "r", "--", "test_bad.py"], cwd=tmp_path)
    assert done.returncode == 2
    assert "test_bad.py::test_x: blocked_by 'sglang 29792' is not a pull request" in done.stderr


def test_no_tests_collected_is_exit_2(cli, tmp_path):
    done = run_pytest(cli, tmp_path, "sglang_style/test_printed_kl.py", "-k", "no_such_test")
    assert done.returncode == 2
    assert "pytest collected no tests" in done.stderr


def test_junitxml_is_owned_by_the_command(cli, tmp_path):
    done = run_pytest(cli, tmp_path, "--junitxml=mine.xml")
    assert done.returncode == 2
    assert "'--junitxml=mine.xml' is set by kl-bitexact pytest itself" in done.stderr


def test_a_run_killed_mid_way_is_exit_2_naming_the_log(cli, tmp_path):
    done = run_pytest(cli, tmp_path, "crash/test_crash.py")
    assert done.returncode == 2
    assert "pytest exited with code 137 without writing" in done.stderr
    assert str(tmp_path / "logs" / "pytest.log") in done.stderr
    # What it collected is kept, each test the runner's error (issue 36: what did not run).
    document = json.loads((tmp_path / "results.json").read_text())
    assert document["plan"] and document["run"]["finished"] is False
    statuses = {test["status"] for suite in document["suites"] for test in suite["tests"]}
    assert statuses == {"error"}


def test_import_junit_reads_a_truncated_file_with_a_clear_error(cli, tmp_path, printed_run):
    xml = (printed_run[0] / "junit.xml").read_text()
    cut = tmp_path / "cut.xml"
    cut.write_text(xml[: len(xml) // 2])
    done = cli(["import-junit", str(cut), "--out", str(tmp_path / "imported")])
    assert done.returncode == 2
    assert f"{cut}: invalid JUnit XML at line" in done.stderr
    assert "truncated" in done.stderr and "Traceback" not in done.stderr


def test_import_junit_malformed_file(cli, tmp_path):
    bad = tmp_path / "bad.xml"
    bad.write_text('<testsuite><testcase name="a" classname="b"></testsuite>\n')
    done = cli(["import-junit", str(bad)], cwd=tmp_path)
    assert done.returncode == 2
    assert "bad.xml: invalid JUnit XML at line 1" in done.stderr


def test_import_junit_recovers_metrics_from_the_console_log(cli, tmp_path):
    # Produced elsewhere: plain pytest with -s (nothing captured) and no kl-bitexact plugin.
    xml, log = tmp_path / "plain.xml", tmp_path / "console.log"
    with log.open("w") as handle:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-s",
                "-v",
                "-p",
                "no:kl_bitexact",
                f"--junitxml={xml}",
                "sglang_style/test_printed_kl.py",
            ],
            cwd=SUITES,
            stdout=handle,
            stderr=subprocess.STDOUT,
            timeout=120,
            check=False,
        )
    done = cli(["import-junit", str(xml), "--log", str(log), "--out", str(tmp_path / "r")])
    assert done.returncode == 1, done.stderr
    tests = results_by_name(tmp_path / "r")
    assert tests["test_kl_over_threshold"].kl_div == pytest.approx(0.1276259652063808)
    assert tests["test_too_few_decode_hits"].cache_hits == results.CacheHits(16, 32, 0.5)
    assert tests["test_prefill_hits_with_misses"].cache_hits == results.CacheHits(30, 32, 0.5)
    assert tests["test_bit_exact"].kl_div == 0.0
    without_log = cli(["import-junit", str(xml), "--out", str(tmp_path / "n")])
    assert results_by_name(tmp_path / "n")["test_bit_exact"].kl_div is None
    assert json.loads((tmp_path / "n" / "results.json").read_text())["schema_version"] == 1
    assert without_log.returncode == 1


def test_sglang_style_suite_against_the_reference_engine(cli, tmp_path):
    ratio = ["--min-cache-hit-ratio", "0.99"]
    done = cli(
        ["pytest", "--out", str(tmp_path), *ratio, "--", "sglang_style/test_reference_kl.py"],
        cwd=SUITES,
        timeout=300,
    )
    # TestServerDoesNotStart errors: a test that could not be measured exits 2 (could not
    # run), not 1 like a clean red run (issue 31); results.json holds every verdict reached.
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr
    loaded = results_io.load(tmp_path / "results.json")
    tests = {test.id.split("::", 1)[1]: test for _, test in loaded.all_tests()}
    for name in ("match", "match_prefill_cache_hit", "match_decode_cache_hit"):
        green = tests[f"TestReferenceKL::test_input_output_logprobs_{name}"]
        assert green.status is results.Status.PASSED
        assert (green.kl_div, green.kl_threshold, green.kl_per_sample) == (0.0, 1e-9, (0.0,) * 8)
        expected_hits = None if name == "match" else results.CacheHits(8, 8, 0.99)
        assert green.cache_hits == expected_hits
    misaligned = tests[
        "TestMisalignedTrackInterval::test_input_output_logprobs_match_decode_cache_hit"
    ]
    assert misaligned.status is results.Status.FAILED
    assert misaligned.check == "decode_cache_hit"
    hits = misaligned.cache_hits
    assert hits is not None and hits.total == 8 and hits.hit < 8 and hits.min_ratio == 0.99
    assert misaligned.message.startswith(f"AssertionError: Too few decode cache hits: {hits.hit}/8")
    assert misaligned.kl_div is None
    faulty = tests["TestCheckpointOffByOne::test_input_output_logprobs_match_decode_cache_hit"]
    assert faulty.status is results.Status.FAILED
    assert faulty.kl_div is not None and faulty.kl_div > 1e-6
    assert faulty.kl_per_sample is not None
    assert faulty.kl_div == pytest.approx(sum(faulty.kl_per_sample) / 8)
    assert faulty.kl_threshold == 1e-9
    disabled = tests["TestRadixCacheDisabled::test_input_output_logprobs_match_prefill_cache_hit"]
    assert disabled.status is results.Status.NOT_RUN
    no_server = tests["TestServerDoesNotStart::test_input_output_logprobs_match"]
    assert no_server.status is results.Status.ERROR
    assert "reference server did not start" in no_server.message


def test_plugin_suite_against_the_reference_engine(cli, tmp_path):
    done = run_pytest(cli, tmp_path, "plugin_style/test_plugin_reference.py")
    # A server died under one test: could not be measured, so exit 2 (issue 31).
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr
    loaded = results_io.load(tmp_path / "results.json")
    suites = {suite.name: suite for suite in loaded.suites}
    assert suites["plugin-reference"].server.engine == "reference"
    assert "--mamba-track-interval" in suites["plugin-reference"].server.args
    tests = results_by_name(tmp_path)
    match = tests["test_match_is_bit_exact"]
    assert (match.status, match.check, match.kl_div) == (results.Status.PASSED, "match", 0.0)
    assert match.exact == results.ExactMatch(tokens=256, mismatched=0)
    decode = tests["test_decode_from_the_suite_spec"]
    assert decode.cache_hits == results.CacheHits(8, 8, 0.99, expected=8)
    by_hand = tests["test_recorded_by_hand"]
    assert (by_hand.check, by_hand.exact) == ("replay_by_hand", results.ExactMatch(8, 0))
    assert tests["test_one_server_for_the_module"].status is results.Status.PASSED
    diverges = tests["test_decode_diverges"]
    assert diverges.status is results.Status.FAILED
    assert diverges.blocked_by == ("sgl-project/sglang#29792",)
    assert diverges.message.startswith("avg KL")
    assert diverges.kl_div is not None and diverges.kl_div > 1e-6
    assert diverges.exact is not None and diverges.exact.mismatched > 0
    assert tests["test_prefill_is_not_run"].status is results.Status.NOT_RUN
    died = tests["test_check_after_the_server_died"]
    assert died.status is results.Status.ERROR
    assert "server exited with code -9" in died.message
    assert list((tmp_path / "logs").glob("server-plugin-reference*.log"))


def test_kl_base_url_attaches_to_a_running_server(cli, tmp_path, reference_server):
    running = reference_server("--enable-deterministic-inference")
    done = run_pytest(cli, tmp_path, "plugin_style/test_attach.py", "--kl-base-url", running.url)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    (test,) = results_by_name(tmp_path).values()
    assert (test.status, test.kl_div) == (results.Status.PASSED, 0.0)
    assert running.process.poll() is None  # still serving: not ours to stop


def test_python_runs_pytest_with_the_engines_interpreter_and_kl_bitexact_after_its_packages(
    cli, tmp_path
):
    """The action's venv has no engine; the runner's Python (its `python` input) has. A bare
    environment of this interpreter with one package of its own stands for the latter."""
    venv = tmp_path / "engine-env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    interpreter = venv / "bin" / "python"
    site = subprocess.run(
        [str(interpreter), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(site, "enginemarker.py").write_text("WHERE = 'the engine interpreter'\n")
    (tmp_path / "test_engine.py").write_text(
        "import unittest\n\nimport enginemarker\n\n\nclass TestEngine(unittest.TestCase):\n"
        "    def test_kl(self):\n        print(enginemarker.WHERE)\n"
    )
    own = cli(["pytest", "--out", str(tmp_path / "own"), "--", "test_engine.py"], cwd=tmp_path)
    assert own.returncode == 2  # this interpreter has no such engine: an import error
    done = cli(
        [
            "pytest",
            "--python",
            str(interpreter),
            "--out",
            str(tmp_path / "out"),
            "--",
            "test_engine.py",
        ],
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    [test] = [t for _, t in results_io.load(tmp_path / "out" / "results.json").all_tests()]
    assert (test.id, test.status) == ("test_engine.py::TestEngine::test_kl", results.Status.PASSED)
    missing = cli(["pytest", "--python", "no-such-python3", "--", "test_engine.py"], cwd=tmp_path)
    assert missing.returncode == 2 and "--python no-such-python3: no such interpreter" in (
        missing.stderr
    )


def test_the_child_pytest_observes_logprobs_and_exact_makes_them_gate() -> None:
    """Every `kl-bitexact pytest` child pairs its servers' logprobs (--kl-observe); with
    `--exact` (the proof run too) a differing one fails the test (--kl-exact)."""
    from kl_bitexact.commands.pytest_cmd import pytest_command

    plain = pytest_command(["t.py"], Path("j.xml"))
    assert "--kl-observe" in plain and "--kl-exact" not in plain
    exact = pytest_command(["t.py"], Path("j.xml"), exact=True)
    assert "--kl-exact" in exact


def test_a_unittest_main_file_collects_what_unittest_runs_and_nothing_else(cli, tmp_path):
    """Issue 38: module-level helpers `test_prefill_cache_hit(base_url, ...)` in a file run by
    `unittest.main()` were collected as tests and errored (`fixture 'base_url' not found`),
    and a plain class unittest never runs was run."""
    done = run_pytest(cli, tmp_path, "sglang_unittest/test_module_level_helpers.py")
    tests = {t.id: t for _, t in results_io.load(tmp_path / "results.json").all_tests()}
    case = "sglang_unittest/test_module_level_helpers.py::TestCacheHitKL::"
    assert list(tests) == [case + "test_prefill_and_decode_cache_hit"], done.stdout
    assert tests[case + "test_prefill_and_decode_cache_hit"].status is results.Status.PASSED


def test_kl_expect_makes_a_dropped_knob_not_exercised_and_keeps_the_kept_one_green(cli, tmp_path):
    """Issue 35: facts for sglang's own files, under `kl-bitexact pytest`."""
    done = cli(
        ["pytest", "--out", str(tmp_path), "--", "sglang_style/test_reference_facts.py"],
        cwd=SUITES,
        timeout=300,
    )
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr
    tests = results_by_name(tmp_path)
    dropped = results_io.load(tmp_path / "results.json")
    by_class = {t.id.split("::")[1]: t for _, t in dropped.all_tests()}
    knob = by_class["TestHicacheKnobDropped"]
    said = "enable_hierarchical_cache: expected true, the server reported false (GET /server_info)"
    assert knob.status is results.Status.NOT_EXERCISED and said in knob.message
    assert knob.kl_div == 0.0  # its numbers passed: they are not about the host tier
    kept = by_class["TestHicache"]
    assert kept.status is results.Status.PASSED
    assert [f.state.value for f in kept.facts] == ["holds", "holds"]
    assert len(tests) == 1  # both tests share a name; the classes tell them apart
    assert said in done.stdout  # the terminal says which fact and what the server said
