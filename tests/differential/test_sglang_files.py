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

FILE = Path(__file__).parents[1] / "fixtures" / "pytest_suites" / "sglang_shaped"


def run(tmp_path: Path, fault: str | None) -> tuple[subprocess.CompletedProcess[str], dict]:
    env = sglang_wheel.child_env(tmp_path, fault=fault)
    out = tmp_path / "out"
    command = ["pytest", "--out", str(out), "--", "-p", "sglang_wheel", "test_sglang_shaped_kl.py"]
    done = subprocess.run(
        [sys.executable, "-m", "kl_bitexact", *command],
        cwd=FILE,
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
