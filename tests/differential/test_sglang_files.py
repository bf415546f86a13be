"""sglang-shaped test files, with sglang's own helpers, through `kl-bitexact pytest`.

The file (tests/fixtures/pytest_suites/sglang_shaped/) imports `sglang.test.*`; the
`sglang_wheel` plugin resolves them to sglang 0.5.23's files and starts the reference engine
for `popen_launch_server` ($KL_BITEXACT_REFERENCE_ARGS adds a fault). Prompts come from
sglang's LongBench cache file under $XDG_CACHE_HOME, written here.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import sglang_wheel

from kl_bitexact.results import io as results_io
from kl_bitexact.results.model import Status

SUITES = Path(__file__).parents[1] / "fixtures" / "pytest_suites"
FILE = SUITES / "sglang_shaped"
LOOSE = SUITES / "sglang_loose"
DETERMINISTIC = ("--enable-deterministic-inference",)


def run(
    tmp_path: Path,
    fault: str | None,
    *,
    where: Path = FILE,
    file: str = "test_sglang_shaped_kl.py",
    reference_args: tuple[str, ...] = (),
    options: tuple[str, ...] = (),
) -> tuple[subprocess.CompletedProcess[str], dict]:
    env = sglang_wheel.child_env(tmp_path, fault=fault, reference_args=reference_args)
    out = tmp_path / "out"
    command = ["pytest", *options, "--out", str(out), "--", "-p", "sglang_wheel", file]
    done = subprocess.run(
        [sys.executable, "-m", "kl_bitexact", *command],
        cwd=where,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    loaded = results_io.load(out / "results.json") if (out / "results.json").exists() else None
    tests = {t.id.rsplit("::", 1)[1]: t for _, t in loaded.all_tests()} if loaded else {}
    return done, tests


def test_a_healthy_server_is_green_and_imported_helpers_are_no_tests(
    tmp_path: Path, sglang_oracle: Callable[[str], ModuleType]
) -> None:
    done, tests = run(tmp_path, None)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    # what `python3 file.py` runs: the three TestCase methods, not the imported helper
    assert sorted(tests) == [
        "test_input_output_logprobs_match",
        "test_input_output_logprobs_match_decode_cache_hit",
        "test_input_output_logprobs_match_prefill_cache_hit",
    ]
    assert all(t.status is Status.PASSED for t in tests.values())
    decode = tests["test_input_output_logprobs_match_decode_cache_hit"]
    assert decode.kl_div == 0.0 and decode.cache_hits is not None
    assert decode.cache_hits.hit == decode.cache_hits.total == 6


@pytest.mark.parametrize("fault", ["checkpoint-off-by-one"])
def test_a_fault_turns_the_cache_hit_tests_red(
    tmp_path: Path, sglang_oracle: Callable[[str], ModuleType], fault: str
) -> None:
    done, tests = run(tmp_path, fault)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    decode = tests["test_input_output_logprobs_match_decode_cache_hit"]
    assert decode.status is Status.FAILED and decode.kl_div is not None
    assert decode.kl_div > 1e-6
    assert tests["test_input_output_logprobs_match"].status is Status.PASSED


def run_loose(tmp_path: Path, fault: str | None, *options: str) -> tuple[int, dict, str]:
    done, tests = run(
        tmp_path,
        fault,
        where=LOOSE,
        file="test_loose_threshold_kl.py",
        reference_args=DETERMINISTIC,
        options=options,
    )
    return done.returncode, tests, done.stdout[-3000:] + done.stderr[-2000:]


KL_TESTS = (
    "test_input_output_logprobs_match_prefill_cache_hit",
    "test_input_output_logprobs_match_decode_cache_hit",
    "test_multiturn_decode_cache_hit_branching",
)


def test_sglangs_kits_run_on_a_healthy_deterministic_engine_with_no_differing_logprob(
    tmp_path: Path, sglang_oracle: Callable[[str], ModuleType]
) -> None:
    """The kits a real KL file imports are served (ids up to 30000, streamed cache-hit
    rounds, a LongBench cache for the file's model); the accuracy eval is skipped as needing
    a real model; the observer paired every KL test's logprobs and none differs."""
    returncode, tests, output = run_loose(tmp_path, None)
    assert returncode == 0, output
    for name in KL_TESTS:
        test = tests[name]
        assert test.status is Status.PASSED, (name, test.message)
        assert test.exact is not None and test.exact.tokens > 0, name
        assert test.exact.mismatched == 0 and not test.first_divergence, name
    assert tests["test_multiturn_cache_hit"].status is Status.PASSED
    gsm8k = tests["test_gsm8k"]
    assert gsm8k.status is Status.SKIPPED and "needs a real model" in gsm8k.message


def test_a_fault_under_a_loose_threshold_shows_in_the_exact_count_and_exact_fails_it(
    tmp_path: Path, sglang_oracle: Callable[[str], ModuleType]
) -> None:
    """checkpoint-off-by-one moves logprobs far less than sglang's 0.02: the file stays green,
    the observer's count says how many logprobs differ and where, and --exact fails it."""
    returncode, tests, output = run_loose(tmp_path / "loose", "checkpoint-off-by-one")
    assert returncode == 0, output
    decode = tests["test_input_output_logprobs_match_decode_cache_hit"]
    assert decode.status is Status.PASSED and decode.kl_div is not None
    assert decode.exact is not None
    assert f"differ={decode.exact.mismatched}/{decode.exact.tokens})" in output  # the tally
    assert 0 < decode.kl_div < 0.02
    assert decode.exact is not None and decode.exact.mismatched > 0
    assert not decode.exact.enforced and decode.first_divergence
    returncode, tests, output = run_loose(tmp_path / "exact", "checkpoint-off-by-one", "--exact")
    assert returncode == 1, output
    decode = tests["test_input_output_logprobs_match_decode_cache_hit"]
    assert decode.status is Status.FAILED and decode.exact is not None and decode.exact.enforced
    assert f"{decode.exact.mismatched}/{decode.exact.tokens} logprobs differ" in decode.message
