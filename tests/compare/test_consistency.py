"""Issue 14, case 3: the gate recomputes each verdict from the test's own numbers.

A results file comes from a job that ran PR code. A test saying `passed` with KL 5.0
against a 1e-9 threshold, 4096/4096 differing logprobs in exact mode and 0/32 cache hits
rendered "gate passed" with those numbers on screen; now it is an error that gates.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from golden_scenarios import BLOCKER, check_result, results

from kl_bitexact.compare.blockers import BlockerState
from kl_bitexact.compare.comparison import compare
from kl_bitexact.compare.consistency import contradictions
from kl_bitexact.compare.gate import FailOn, Policy, Verdict
from kl_bitexact.errors import ExitCode
from kl_bitexact.results import io as results_io
from kl_bitexact.results import model as r

FORGED = check_result(
    "forged",
    kl_div=5.0,
    kl_per_sample=(5.0,) * 32,
    exact=r.ExactMatch(tokens=4096, mismatched=4096, enforced=True),
    cache_hits=r.CacheHits(hit=0, total=32, min_ratio=0.99),
)


def test_the_issues_forged_pass_is_an_error_that_gates_with_the_reason():
    comparison = compare(results(FORGED), results(check_result("forged")))
    [delta] = comparison.deltas
    assert delta.verdict is Verdict.INFRA and delta.gating
    assert delta.head is not None and delta.head.status is r.Status.ERROR
    message = delta.head.message
    assert "contradicts its own numbers" in message
    assert "avg KL 5.00e+00 is not below its threshold 1e-09" in message
    assert "exact mode, yet 4096/4096 logprobs differ" in message
    assert "0/32 cache hits" in message
    assert comparison.decision.exit_code is ExitCode.GATE_FAILED


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"kl_div": 1e-9}, "not below its threshold"),  # strict <, as sglang
        ({"kl_div": float("nan")}, "not below its threshold"),
        ({"kl_per_sample": (0.0, 2e-9)}, "per-sample KLs average"),
        ({"exact": r.ExactMatch(4096, 1, enforced=True)}, "exact mode"),
        ({"exact": r.ExactMatch(10, 11)}, "11 differing logprobs of 10"),
        ({"exact": r.ExactMatch(0, 0)}, "no logprob was compared"),
        ({"cache_hits": r.CacheHits(31, 32, 0.99)}, "31/32 cache hits"),
        ({"cache_hits": r.CacheHits(0, 0, 0.5)}, "0/0 cache hits"),
    ],
)
def test_each_number_that_contradicts_a_pass_is_named(changes, reason):
    found = contradictions(dataclasses.replace(check_result("t"), **changes))
    assert len(found) == 1 and reason in found[0]


def test_numbers_that_agree_leave_the_status_alone():
    assert contradictions(check_result("t")) == []
    # Differing logprobs under the KL threshold pass when the test is not exact.
    lenient = check_result("t", kl_div=1e-12, exact=r.ExactMatch(4096, 3))
    assert contradictions(lenient) == []
    # All samples hitting suffices even at ratio 1.0; red statuses are not second-guessed.
    assert contradictions(check_result("t", cache_hits=r.CacheHits(32, 32, 1.0))) == []
    assert contradictions(dataclasses.replace(FORGED, status=r.Status.FAILED)) == []


def test_an_open_blocker_or_a_red_base_does_not_excuse_a_forged_pass():
    forged = dataclasses.replace(FORGED, blocked_by=(BLOCKER,))
    red_base = results(check_result("forged", r.Status.FAILED))
    comparison = compare(
        results(forged),
        red_base,
        blockers={BLOCKER: BlockerState.OPEN},
        policy=Policy(FailOn.REGRESSION),
    )
    assert comparison.deltas[0].gating and not comparison.decision.passed


def test_report_on_a_forged_results_file_fails_the_gate(cli, tmp_path):
    head, base = tmp_path / "head.json", tmp_path / "base.json"
    results_io.write_atomic(results(FORGED), head)
    results_io.write_atomic(results(check_result("forged")), base)
    answer = cli(["report", str(head), "--baseline", str(base), "--json"])
    assert answer.returncode == 1, answer.stderr
    verdict = json.loads(answer.stdout)
    assert verdict["verdict"] == "failed" and not verdict["passed"], verdict
    markdown = cli(["report", str(head), "--baseline", str(base)])
    assert "gate failed" in markdown.stdout and "contradicts its own numbers" in markdown.stdout


def test_a_pass_by_the_noise_floor_is_judged_by_the_floor() -> None:
    drift = r.TestResult(
        id="s::prefill",
        check="prefill_cache_hit",
        status=r.Status.PASSED,
        kl_div=1.9e-4,
        kl_threshold=1e-9,
        kl_per_sample=(1.9e-4,),
        exact=r.ExactMatch(tokens=160, mismatched=160, enforced=True),
        noise_floor=r.NoiseFloor(kl=1.6e-4, ratio=1.19, factor=4.0, margin=1e-9),
    )
    assert contradictions(drift) == []  # within 4 x 1.6e-4: the threshold does not apply
    fault = dataclasses.replace(drift, kl_div=9e-4, kl_per_sample=(9e-4,))
    assert contradictions(fault) == [
        "avg KL 9.000e-04 > 4 x noise floor 1.600e-04 + 1e-09 (the same prompts with no cache)"
    ]
    # Measured but not gating (gate: bit-exact): the threshold and exact rules stand.
    ungated = dataclasses.replace(drift, noise_floor=r.NoiseFloor(kl=1.6e-4))
    assert len(contradictions(ungated)) == 2
