"""The one verdict rule (results/verdict.py), and the gate applying it to recorded numbers.

Issue 14, case 3: a results file comes from a job that ran PR code. A test saying `passed`
with KL 5.0 against a 1e-9 threshold, 4096/4096 differing logprobs in exact mode and 0/32
cache hits rendered "gate passed" with those numbers on screen; now it is an error that
gates. Issue 30, item 2: a pass must prove something - the numbers its check needs,
recorded and possible. Issue 27, item 2: run, report and the pytest plugin judge by the
same function, so they cannot disagree.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from golden_scenarios import BLOCKER, check_result, results
from msgspec import structs

from kl_bitexact.compare.blockers import BlockerState
from kl_bitexact.compare.comparison import compare
from kl_bitexact.compare.gate import FailOn, Policy, Verdict
from kl_bitexact.errors import ExitCode
from kl_bitexact.results import io as results_io
from kl_bitexact.results import model as r
from kl_bitexact.results import verdict
from kl_bitexact.results.aggregate import average
from kl_bitexact.results.formats import fmt_kl, shown_kl

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
    assert "avg KL 5.000e+00 >= threshold 1e-09" in message
    assert "exact: 4096/4096 logprobs differ" in message
    assert "cache hits: 0/32" in message
    assert comparison.decision.exit_code is ExitCode.GATE_FAILED


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"kl_div": 1e-9, "kl_per_sample": (1e-9,) * 32}, ">= threshold"),  # strict <
        ({"kl_div": float("nan")}, ">= threshold"),
        ({"kl_div": 1e-9, "kl_per_sample": (0.0, 2e-9)}, ">= threshold"),
        ({"exact": r.ExactMatch(4096, 1, enforced=True)}, "exact: 1/4096"),
        ({"exact": r.ExactMatch(10, 11)}, "11 differing logprobs of 10"),
        ({"exact": r.ExactMatch(0, 0)}, "no logprob was compared"),
        ({"cache_hits": r.CacheHits(31, 32, 0.99)}, "cache hits: 31/32"),
        ({"cache_hits": r.CacheHits(0, 0, 0.5)}, "cache hits: 0/0"),
    ],
)
def test_each_number_that_contradicts_a_pass_is_named(changes, reason):
    status, reasons = verdict.judge(structs.replace(check_result("t"), **changes), planned=True)
    assert status is not r.Status.PASSED
    assert any(reason in text for text in reasons), reasons


def test_numbers_that_agree_leave_the_status_alone():
    assert verdict.judge(check_result("t"), planned=True) == (r.Status.PASSED, ())
    # Differing logprobs under the KL threshold pass when the test is not exact.
    lenient = check_result("t", kl_div=1e-12, kl_per_sample=(1e-12,) * 32)
    lenient = structs.replace(lenient, exact=r.ExactMatch(4096, 3))
    assert verdict.judge(lenient, planned=True).status is r.Status.PASSED
    # All samples hitting suffices even at ratio 1.0; red statuses are not second-guessed.
    full = check_result("t", cache_hits=r.CacheHits(32, 32, 1.0))
    assert verdict.judge(full, planned=True).status is r.Status.PASSED
    red = structs.replace(FORGED, status=r.Status.FAILED)
    assert verdict.judge(red, planned=True) == (r.Status.FAILED, ())


def test_an_open_blocker_or_a_red_base_does_not_excuse_a_forged_pass():
    forged = structs.replace(FORGED, blocked_by=(BLOCKER,))
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


# --- issue 30, item 2: a pass is a proof --------------------------------------------------

UNPROVEN_PASSES: dict[str, dict[str, Any]] = {
    "no threshold, KL 3.0": {"kl_threshold": None, "kl_div": 3.0, "kl_per_sample": (3.0,) * 32},
    "every number null": {
        "kl_div": None,
        "kl_threshold": None,
        "kl_per_sample": None,
        "exact": None,
        "cache_hits": None,
    },
    "exact mode, nothing compared": {
        "exact": r.ExactMatch(tokens=0, mismatched=0, not_reported=64, enforced=True)
    },
    "KL -1e300": {"kl_div": -1e300},
    "per-sample 1, -1 averaging 0": {"kl_per_sample": (1.0, -1.0) * 16},
    "9 hits of 8": {"cache_hits": r.CacheHits(hit=9, total=8, min_ratio=0.99)},
}


@pytest.mark.parametrize("case", UNPROVEN_PASSES)
def test_a_pass_that_proves_nothing_is_an_error_that_gates(case):
    forged = structs.replace(check_result("t"), **UNPROVEN_PASSES[case])
    comparison = compare(results(forged), results(check_result("t")))
    [delta] = comparison.deltas
    assert delta.head is not None and delta.head.status is r.Status.ERROR, case
    assert delta.gating and delta.verdict is Verdict.INFRA, case
    assert delta.head.message.startswith("status passed "), delta.head.message
    assert comparison.decision.exit_code is ExitCode.GATE_FAILED


def test_each_unproven_pass_says_what_is_missing_or_impossible():
    said = {
        case: verdict.judge(structs.replace(check_result("t"), **changes), planned=True)
        for case, changes in UNPROVEN_PASSES.items()
    }
    assert "multiturn recorded no KL threshold" in said["no threshold, KL 3.0"].reasons[0]
    assert said["every number null"].reasons == (
        "multiturn recorded no KL threshold, no avg KL, no per-sample KLs, "
        "no compared logprobs, no cache hits",
    )
    assert said["exact mode, nothing compared"].reasons[0] == (
        "no logprob was compared (64 not reported by the server)"
    )
    assert "avg KL -1e+300 is below 0" in said["KL -1e300"].reasons[0]
    assert "16 per-sample KL below 0" in said["per-sample 1, -1 averaging 0"].reasons[0]
    assert "9 cache hits of 8 samples" in said["9 hits of 8"].reasons[0]
    # A check that is no KL check is judged by what it recorded (a planned pytest test,
    # issue 36): the same numbers pass; nothing recorded is "passed - not a KL check".
    assert verdict.judge(check_result("t", check="bogus"), planned=True).status is r.Status.PASSED


def test_results_without_a_plan_stay_accepted_as_far_as_their_tests_go():
    # A JUnit import's plain pytest test records no number: its own assertions passed, shown
    # as "passed - not a KL check" (issue 36), not gating, not a KL pass.
    plain = r.TestResult(id="test_x.py::test_y", check="pytest", status=r.Status.PASSED)
    comparison = compare(results(plain, planned=False), None)
    assert comparison.deltas[0].verdict is Verdict.NOT_A_KL_CHECK and comparison.decision.passed
    # Numbers that cannot be still are not: no plan makes 9 hits of 8 possible.
    nine = check_result("t", cache_hits=r.CacheHits(9, 8, 0.5))
    assert not compare(results(nine, planned=False), None).decision.passed


def test_k3_rounding_below_zero_is_a_pass_shown_as_zero():
    rounded = check_result("t", kl_div=-2.89e-19, kl_per_sample=(-2.89e-19,) + (0.0,) * 31)
    rounded = structs.replace(rounded, kl_div=average(rounded.kl_per_sample or ()))
    assert verdict.judge(rounded, planned=True).status is r.Status.PASSED
    assert shown_kl(-2.89e-19) == 0.0 and shown_kl(-1e-3) == -1e-3
    assert fmt_kl(-2.89e-19) == "0" and fmt_kl(-1e-3) == "-1.00e-03"


def test_only_the_verdict_module_compares_a_kl_with_its_threshold():
    # Issue 27, item 2: the rule was written three times (run's checks, the gate, the pytest
    # plugin) and the copies drifted. Every other module calls results.verdict.
    import ast
    from pathlib import Path

    import kl_bitexact

    root = Path(kl_bitexact.__file__).parent
    ordering = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)
    comparing = set()
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Compare) or not isinstance(node.ops[0], ordering):
                continue
            names = {getattr(n, "attr", getattr(n, "id", "")) for n in ast.walk(node)}
            if names & {"kl_threshold", "kl_div", "min_ratio"}:
                comparing.add(str(path.relative_to(root)))
    # aggregate: sglang's hit rule itself; metrics: a warning that the geometry cannot reach
    # the ratio (a prediction before anything is measured, not a verdict).
    assert comparing == {"results/verdict.py", "results/aggregate.py", "run/checks/metrics.py"}


def test_the_checks_run_knows_are_the_suites_check_names():
    from kl_bitexact.suite.model import CheckName

    assert {name.value for name in CheckName} == verdict.RUN_CHECKS
    assert verdict.HIT_CHECKS < verdict.RUN_CHECKS and "match" not in verdict.HIT_CHECKS


def test_a_pass_by_the_noise_floor_is_judged_by_the_floor() -> None:
    # Issue 31's gate: noise-floor, in the one rule (was compare/consistency.py's copy).
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
    assert verdict.red(drift) == []  # within 4 x 1.6e-4: the threshold does not apply
    fault = structs.replace(drift, kl_div=9e-4, kl_per_sample=(9e-4,))
    assert verdict.red(fault) == [
        "avg KL 9.000e-04 > 4 x noise floor 1.600e-04 + 1e-09 (the same prompts with no cache)"
    ]
    # Measured but not gating (gate: bit-exact): the threshold and exact rules stand.
    ungated = structs.replace(drift, noise_floor=r.NoiseFloor(kl=1.6e-4))
    assert len(verdict.red(ungated)) == 2


def _round(*, reached: bool) -> r.ConcurrentRound:
    return r.ConcurrentRound(
        cached_tokens=(0, 16), completed=(0, 1), concurrent_hits=int(reached), reached=reached
    )


@pytest.mark.parametrize(
    ("concurrency", "status", "reason"),
    [
        (None, r.Status.ERROR, "concurrent_prefix_hit recorded no concurrent rounds"),
        (
            r.Concurrency("a hit left by another request"),
            r.Status.NOT_EXERCISED,
            "no concurrent round was recorded",
        ),
        (
            r.Concurrency("a hit left by another request", (_round(reached=False),) * 3),
            r.Status.NOT_EXERCISED,
            "none of 3 concurrent round(s) reached",
        ),
        (
            r.Concurrency("a hit left by another request", (_round(reached=True),)),
            r.Status.PASSED,
            "",
        ),
    ],
)
def test_a_concurrent_pass_stands_only_on_a_round_that_reached_its_shape(
    concurrency: r.Concurrency | None, status: r.Status, reason: str
) -> None:
    """A `concurrent_prefix_hit` pass whose rounds are missing, empty or never reached the
    shape observed nothing concurrent: an error or not exercised, never a pass."""
    test = check_result("concurrent", check="concurrent_prefix_hit", concurrency=concurrency)
    judged, _ = verdict.judged(test, planned=False)
    assert judged.status is status
    assert reason in (judged.message or "")
