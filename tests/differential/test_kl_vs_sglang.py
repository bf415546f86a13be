"""kl-bitexact's checks against sglang's own KL helpers, on the same reference servers.

sglang's `kl_test_utils` (from its 0.5.23 wheel, tests/helpers/sglang_wheel.py) and our
`match` / `prefill_cache_hit` / `decode_cache_hit` run on one server each, with the same
prompts (sglang's LongBench cache file, which our suites read as well), the same sampling and
the same threshold. Per-sample KL lists, averages, hit counts and verdicts must be identical:
every float compared with `==`. Servers: deterministic and plain arithmetic, every fault of
reference/faults.py, track intervals aligned and misaligned with the page, EAGLE with and
without the overshoot fault.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from kl_bitexact.reference.faults import Fault
from kl_bitexact.results.model import Status, TestResult
from kl_bitexact.run.checks import metrics, run_check
from kl_bitexact.run.engines.sglang import SglangEngine
from kl_bitexact.suite.model import CheckName, TestSpec

MODEL = "kl-bitexact-reference"
SAMPLES = 4
MAX_NEW_TOKENS = 20
THRESHOLD = 1e-9
# Turn-1 prompt lengths L whose turn-2 hit ends at L+1 (a miss by sglang's `> L + 1`) or L+2
# (a hit) with 8 new tokens: the decode checkpoint lands on the page after the prompt.
BOUNDARY_MODEL = "kl-bitexact-reference-boundary"
BOUNDARY_LENGTHS = (46, 47, 62, 63, 78)
BOUNDARY_NEW_TOKENS = 8
DETERMINISTIC = ("--enable-deterministic-inference",)
SERVERS: dict[str, tuple[str, ...]] = {
    "deterministic": DETERMINISTIC,
    "plain": (),
    "hicache-lossy": (
        *DETERMINISTIC,
        *("--enable-hierarchical-cache", "--max-total-tokens", "384"),
        *("--fault", "hicache-lossy"),
    ),
    "checkpoint-off-by-one": (*DETERMINISTIC, "--fault", "checkpoint-off-by-one"),
    "swa-early-release": (*DETERMINISTIC, "--fault", "swa-early-release"),
    "branch-checkpoint-reuse": (*DETERMINISTIC, "--fault", "branch-checkpoint-reuse"),
    "track-aligned": (*DETERMINISTIC, "--mamba-track-interval", "32"),
    "track-misaligned": (*DETERMINISTIC, "--mamba-track-interval", "12"),
    "eagle": (*DETERMINISTIC, "--speculative-algorithm", "EAGLE"),
    "eagle-overshoot": (
        *DETERMINISTIC,
        *("--speculative-algorithm", "EAGLE", "--speculative-num-draft-tokens", "4"),
        *("--fault", "spec-overshoot-cached"),
    ),
}
# order-dependent-decode makes two runs of the same requests differ (what `run --repeat`
# measures): two tools, like two runs, cannot agree on it, so it is left out on purpose.
RUN_TO_RUN_FAULTS = {"order-dependent-decode"}
CHECKS = {
    "match": "test_input_output_logprobs_match_helper",
    "prefill_cache_hit": "test_input_output_logprobs_match_prefill_cache_hit_helper",
    "decode_cache_hit": "test_input_output_logprobs_match_decode_cache_hit_helper",
}
LISTENING = "kl-bitexact reference server listening on "


@dataclass(frozen=True)
class Outcome:
    """One tool's numbers for one check on one server."""

    kl_per_sample: tuple[float, ...] | None
    kl_div: float | None
    hits: int | None
    passed: bool


def longbench_prompts(model: str = MODEL) -> list[list[int]]:
    """48 prompts of token ids 1..319, fixed: 40..160 long, or the boundary lengths first."""
    rng = np.random.default_rng(15)
    lengths = [int(rng.integers(40, 161)) for _ in range(48)]
    if model == BOUNDARY_MODEL:
        lengths[: len(BOUNDARY_LENGTHS)] = BOUNDARY_LENGTHS
    return [rng.integers(1, 320, length).tolist() for length in lengths]


def longbench_file(model: str) -> str:
    """sglang's cache name: its helpers always load DEFAULT_NUM_SAMPLES (48) prompts of
    DEFAULT_PROMPT_TOKENS (3000), then take the first max_samples."""
    return f"input_ids_{model}_3000_48.json"


@pytest.fixture(scope="module")
def prompt_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as directory:
        for model in (MODEL, BOUNDARY_MODEL):
            Path(directory, longbench_file(model)).write_text(json.dumps(longbench_prompts(model)))
        yield Path(directory)


class SeededRequests:
    """sglang's helpers send no `sampling_seed`, so the reference engine draws one per request;
    greedy tokens do not depend on it, but EAGLE's draft (hence which tokens overshoot into
    the cache) does. Both tools are pinned to seed 0: ours by its suite `seed`, sglang's by
    this stand-in for the `requests` module its helpers call (it only adds the seed)."""

    def __init__(self, real: ModuleType) -> None:
        self.real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def post(self, url: str, json: Any = None, **kwargs: Any) -> Any:
        if isinstance(json, dict) and isinstance(json.get("sampling_params"), dict):
            json = {**json, "sampling_params": {"sampling_seed": 0, **json["sampling_params"]}}
        return self.real.post(url, json=json, **kwargs)


@pytest.fixture(scope="module")
def kl_utils(sglang_oracle: Callable[[str], ModuleType], prompt_dir: Path) -> Iterator[ModuleType]:
    """sglang's kl_test_utils reading its LongBench cache from `prompt_dir`, seed pinned."""
    module = sglang_oracle("kl_test_utils")
    saved = module.CACHE_DIR, module.requests
    module.CACHE_DIR = str(prompt_dir)
    module.requests = SeededRequests(saved[1])
    module._cached_input_ids.clear()
    yield module
    module.CACHE_DIR, module.requests = saved
    module._cached_input_ids.clear()


@pytest.fixture(scope="module")
def servers() -> Iterator[Callable[[str], str]]:
    """Reference servers by name (SERVERS), each started once for the module."""
    started: dict[str, tuple[subprocess.Popen[str], str]] = {}

    def url(name: str) -> str:
        if name not in started:
            command = [sys.executable, "-m", "kl_bitexact", "serve-reference", "--port", "0"]
            process = subprocess.Popen(
                [*command, *SERVERS[name]],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            assert process.stdout is not None
            line = process.stdout.readline()
            assert line.startswith(LISTENING), f"{name}: {line!r}"
            started[name] = (process, line[len(LISTENING) :].strip())
        return started[name][1]

    yield url
    for process, _ in started.values():
        process.terminate()
        process.wait(timeout=10)
        assert process.stdout is not None
        process.stdout.close()


@dataclass(frozen=True)
class Case:
    model: str = MODEL
    samples: int = SAMPLES
    max_new_tokens: int = MAX_NEW_TOKENS


def sglang_outcome(kl_utils: ModuleType, check: str, url: str, case: Case = Case()) -> Outcome:
    """Run sglang's helper; its printed numbers and whether it raised."""
    helper = getattr(kl_utils, CHECKS[check])
    acc = {case.model: {"kl_div": THRESHOLD}}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        try:
            helper(
                url, acc, case.model, max_samples=case.samples, max_new_tokens=case.max_new_tokens
            )
            passed = True
        except AssertionError:
            passed = False
    return parse_printed(printed.getvalue(), check, passed, case.samples)


def parse_printed(text: str, check: str, passed: bool, samples: int = SAMPLES) -> Outcome:
    kl_line = re.search(r"^kl_divs=(.*)$", text, re.MULTILINE)
    avg_line = re.search(r"^avg_kl_div=(.*)$", text, re.MULTILINE)
    namespace: dict[str, Any] = {"np": np, "nan": math.nan, "inf": math.inf}
    kl_divs = eval(kl_line.group(1), namespace) if kl_line else None  # our own capture
    avg = float(eval(avg_line.group(1), namespace)) if avg_line else None
    misses = len(re.findall(r"cache miss for prompt \d+, skipping", text))
    hits = None if check == "match" else samples - misses
    per_sample = tuple(float(value) for value in kl_divs) if kl_divs is not None else None
    return Outcome(per_sample, avg, hits, passed)


def our_outcome(check: str, url: str, case: Case = Case()) -> tuple[Outcome, TestResult]:
    spec = TestSpec(
        name=check,
        check=CheckName(check),
        samples=case.samples,
        prompts=tuple(tuple(p) for p in longbench_prompts(case.model)),
        max_new_tokens=case.max_new_tokens,
        kl_threshold=THRESHOLD,
        min_cache_hit_ratio=0.5,  # sglang's `> 0.5 * n`
        temperature=0.0,  # sglang's _generate samples greedily
        vocab_size=320,
        separator_ids=(1 + ord(",") % 319,),  # the shim tokenizer's ","
    )
    result = run_check(SglangEngine(url), spec)
    hits = result.cache_hits.hit if result.cache_hits is not None else None
    compared = result.status is not Status.NOT_RUN or result.kl_per_sample
    outcome = Outcome(
        result.kl_per_sample if compared else None,
        result.kl_div,
        hits,
        result.status is Status.PASSED,
    )
    return outcome, result


@pytest.mark.parametrize("check", list(CHECKS))
@pytest.mark.parametrize("server", list(SERVERS))
def test_same_numbers_as_sglangs_helpers(
    kl_utils: ModuleType, servers: Callable[[str], str], server: str, check: str
) -> None:
    url = servers(server)
    theirs = sglang_outcome(kl_utils, check, url)
    ours, result = our_outcome(check, url)
    if theirs.hits is not None and theirs.hits <= SAMPLES // 2:
        # sglang stops at its hit-ratio assert before computing any KL; so do we, in effect.
        assert ours.hits == theirs.hits and not ours.passed and not theirs.passed
        return
    assert ours == theirs, result.message


def test_every_cache_fault_has_a_server() -> None:
    covered = {arg for args in SERVERS.values() for arg in args}
    assert {fault.value for fault in Fault} - RUN_TO_RUN_FAULTS <= covered


def test_the_servers_differ_so_the_comparison_means_something(
    kl_utils: ModuleType, servers: Callable[[str], str]
) -> None:
    """Healthy servers pass with KL 0 and faults fail, for both tools: not all-equal zeros."""
    healthy = our_outcome("decode_cache_hit", servers("deterministic"))[0]
    broken = our_outcome("decode_cache_hit", servers("checkpoint-off-by-one"))[0]
    assert healthy.passed and healthy.kl_div == 0.0 and healthy.hits == SAMPLES
    assert not broken.passed and broken.kl_div is not None and broken.kl_div > THRESHOLD


def test_decode_hits_counted_at_sglangs_boundary(
    kl_utils: ModuleType, servers: Callable[[str], str]
) -> None:
    """Turn 2 resuming at exactly prompt + 1 is a miss, at prompt + 2 a hit (sglang's rule);
    counting one token either way changes the hits."""
    case = Case(BOUNDARY_MODEL, len(BOUNDARY_LENGTHS), BOUNDARY_NEW_TOKENS)
    theirs = sglang_outcome(kl_utils, "decode_cache_hit", servers("deterministic"), case)
    ours, result = our_outcome("decode_cache_hit", servers("deterministic"), case)
    assert theirs.hits == 3  # lengths 46, 62, 78
    assert ours == theirs, result.message


def test_both_minus_infinity_is_the_one_deliberate_difference(kl_utils: ModuleType) -> None:
    """A token both runs give probability 0: sglang's exp(-inf - -inf) is NaN (its average is
    NaN, `NaN < threshold` is False, so it fails); ours counts two identical values as 0."""
    printed = io.StringIO()
    acc = {MODEL: {"kl_div": THRESHOLD}}
    quiet = np.errstate(invalid="ignore")
    with contextlib.redirect_stdout(printed), pytest.raises(AssertionError), quiet:
        kl_utils.compare_kl_divergence([[-math.inf, -1.0]], [[-math.inf, -1.0]], acc, MODEL, "t")
    theirs = parse_printed(printed.getvalue(), "match", passed=False)
    assert theirs.kl_per_sample is not None and math.isnan(theirs.kl_per_sample[0])
    assert metrics.k3((-math.inf, -1.0), (-math.inf, -1.0)) == 0.0
