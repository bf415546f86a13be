"""The scenarios whose rendered comments are kept as golden files in tests/golden/.

Each is a real situation from the seeds (sglang PRs 34356, 34405, 35293) or an edge the
report must handle. `python tests/golden/refresh.py` re-renders them and shows the diff.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import history_runs
from msgspec import structs

from kl_bitexact.compare.baseline import Baseline
from kl_bitexact.compare.blockers import BlockerState
from kl_bitexact.compare.comparison import compare
from kl_bitexact.compare.gate import FailOn, Policy
from kl_bitexact.compare.history import History
from kl_bitexact.compare.history import Run as HistoryRun
from kl_bitexact.compare.history import build as build_history
from kl_bitexact.registry.findings import Severity
from kl_bitexact.registry.findings_file import Finding
from kl_bitexact.report import render
from kl_bitexact.results import model as r

GOLDEN_DIR = Path(__file__).parents[1] / "golden"
LINKS = render.Links(
    run="https://github.com/sgl-project/sglang/actions/runs/123456",
    artifact="https://github.com/sgl-project/sglang/actions/runs/123456/artifacts/789",
)
BLOCKER = "sgl-project/sglang#29792"
MULTITURN_WARNING = (
    "mamba track interval 256 is not a multiple of page size 128: half the prompts cannot hit"
)


def check_result(
    test_id: str, status: r.Status = r.Status.PASSED, **changes: object
) -> r.TestResult:
    """A 32-sample multi-turn check, bit-exact unless `changes` say otherwise."""
    base = r.TestResult(
        id=test_id,
        check="multiturn",
        status=status,
        kl_div=0.0,
        kl_threshold=1e-9,
        kl_per_sample=(0.0,) * 32,
        exact=r.ExactMatch(tokens=4096, mismatched=0),
        cache_hits=r.CacheHits(hit=32, total=32, min_ratio=0.99, expected=32),
        duration_s=41.2,
    )
    return structs.replace(base, **changes)


def red_hicache(test_id: str, **changes: object) -> r.TestResult:
    """PR 34356 before PR 29792: host-memory round trip changed the last bits."""
    per_sample = tuple(1.906e-4 if i % 2 else 0.0 for i in range(32))
    divergences = tuple(
        r.Divergence(
            sample=i,
            token_index=128,
            cached_tokens=640,
            decode_logprob=-2.3125,
            replay_logprob=-2.3125002,
            hint="first token after a restored track checkpoint (interval 128)",
        )
        for i in range(1, 32, 2)
    )
    measured: dict[str, object] = {
        "kl_div": 9.53e-05,
        "kl_per_sample": per_sample,
        "exact": r.ExactMatch(tokens=4096, mismatched=1040),
        "first_divergence": divergences,
        "message": "avg KL 9.53e-05 >= threshold 1e-09",
    }
    return check_result(test_id, r.Status.FAILED, **{**measured, **changes})


def results(
    *tests: r.TestResult,
    suite: str = "hicache-mamba",
    commit: str = "1a2b3c4d5e6f",
    planned: bool = True,
) -> r.Results:
    """A finished run of `tests` whose plan was exactly them (`planned=False`: a file
    from before runs recorded their plan)."""
    server = r.ServerInfo(
        "sglang",
        ("--page-size", "128", "--mamba-track-interval", "128", "--enable-hierarchical-cache"),
        88.0,
    )
    return r.Results(
        run=r.RunInfo(
            commit=commit,
            ref="refs/pull/34356/merge",
            started_at="2026-11-29T09:00:00Z",
            finished=True if planned else None,
        ),
        suites=(r.SuiteResult(suite, server, tests, file=f"suites/{suite}.yaml"),),
        plan=tuple(r.PlannedTest(suite, t.id, t.check) for t in tests) if planned else None,
    )


@dataclass(frozen=True)
class Scenario:
    name: str
    head: r.Results
    base: r.Results | Baseline | None
    blockers: dict[str, BlockerState] | None = None
    policy: Policy = field(default_factory=Policy)
    findings: tuple[Finding, ...] = ()
    budget: int | None = render.COMMENT_LIMIT
    links: render.Links = LINKS
    proof: r.Results | None = None  # the new and changed tests on the base revision
    history: History | None = None  # the base branch's recent runs (issue 28)

    def render(self) -> str:
        comparison = compare(
            self.head,
            self.base,
            blockers=self.blockers,
            policy=self.policy,
            default_repo="sgl-project/sglang",
            proof=self.proof,
            history=self.history,
        )
        return render.comment(
            comparison, key="bitexact", findings=self.findings, links=self.links, budget=self.budget
        )


GREEN = (
    check_result("test_hicache_mamba.py::test_prefix_hit"),
    check_result("test_hicache_mamba.py::test_branching", cache_hits=r.CacheHits(31, 32, 0.9, 31)),
)


def _expected_red() -> Scenario:
    head = results(
        red_hicache("test_hicache_mamba.py::test_multiturn", blocked_by=(BLOCKER,)), *GREEN
    )
    base = results(*GREEN, commit="0f9e8d7c6b5a")
    return Scenario("expected_red_blocker_open", head, base, {BLOCKER: BlockerState.OPEN})


def _blocker_merged() -> Scenario:
    still_red = red_hicache("test_hicache_mamba.py::test_multiturn", blocked_by=(BLOCKER,))
    now_green = check_result("test_hicache_mamba.py::test_two_turns", blocked_by=("#29792",))
    head = results(still_red, now_green, *GREEN)
    base = results(still_red, structs.replace(now_green, status=r.Status.FAILED), *GREEN)
    return Scenario("blocker_merged", head, base, {BLOCKER: BlockerState.MERGED})


def _too_few_hits() -> Scenario:
    flaky = check_result(
        "test_mamba_decode.py::test_decode_cache_hit",
        r.Status.FAILED,
        check="decode_cache_hit",
        cache_hits=r.CacheHits(hit=16, total=32, min_ratio=0.5, expected=16),
        message="Too few decode cache hits: 16/32",
        warnings=(MULTITURN_WARNING,),
    )
    base = structs.replace(
        flaky, status=r.Status.PASSED, message="", cache_hits=r.CacheHits(17, 32, 0.5, 16)
    )
    return Scenario("too_few_cache_hits", results(flaky, *GREEN), results(base, *GREEN))


def _revert_then_red() -> Scenario:
    reverted = check_result(
        "test_dspark.py::test_spec_prefill_graph",
        r.Status.FAILED,
        kl_div=0.110,
        kl_per_sample=tuple(0.11 + 0.01 * (i % 5) for i in range(32)),
        exact=r.ExactMatch(4096, 4001),
        cache_hits=r.CacheHits(31, 32, 0.9, 31),
        message="avg KL 1.10e-01 >= threshold 1e-09 (fix reverted on purpose)",
    )
    base = structs.replace(
        reverted,
        status=r.Status.PASSED,
        kl_div=0.0,
        kl_per_sample=(0.0,) * 32,
        exact=r.ExactMatch(4096, 0),
        message="",
    )
    policy = Policy(FailOn.FAILURE)
    return Scenario(
        "revert_then_red",
        results(reverted, suite="dspark"),
        results(base, suite="dspark"),
        policy=policy,
    )


def _baseline_unavailable() -> Scenario:
    unavailable = Baseline(
        None,
        "base.json: schema_version 2 is not supported "
        "(this kl-bitexact 0.1.0 reads schema_version 1)",
    )
    return Scenario("baseline_unavailable", results(*GREEN), unavailable)


def _local_report() -> Scenario:
    head = results(red_hicache("test_hicache_mamba.py::test_multiturn"), *GREEN)
    return Scenario("local_no_base_no_links", head, None, links=render.Links())


def _nothing_ran() -> Scenario:
    head = results(
        check_result(
            "test_a.py::test_cache_disabled",
            r.Status.NOT_RUN,
            kl_div=None,
            kl_per_sample=(),
            exact=None,
            cache_hits=None,
            message="radix cache disabled: nothing to compare",
        ),
        check_result(
            "test_a.py::test_gb300_only",
            r.Status.SKIPPED,
            kl_div=None,
            kl_per_sample=(),
            exact=None,
            cache_hits=None,
        ),
    )
    return Scenario("nothing_ran", head, results(*GREEN))


HOSTILE = (
    "x|y`z` @octocat @org/team #1 sgl-project/sglang#1 <img src=x onerror=alert(1)> "
    "</details> ]]> [a](https://evil.example) **b** \u202e"
)


def _hostile() -> Scenario:
    test = red_hicache(
        "test_evil.py::test_" + HOSTILE,
        check=HOSTILE,
        message="line one\n</pre></details><script>alert(1)</script>\n"
        "::set-output name=x::y\n@maintainers",
        warnings=(HOSTILE,),
        blocked_by=(HOSTILE,),
        first_divergence=(r.Divergence(sample=0, token_index=1, hint=HOSTILE),),
    )
    findings = (Finding(HOSTILE, 3, HOSTILE, Severity.ERROR, HOSTILE, HOSTILE),)
    head = results(test, suite="suite " + HOSTILE)
    return Scenario("hostile_strings", head, None, {}, findings=findings)


def _findings() -> Scenario:
    findings = (
        Finding(
            "test/registered/test_mamba_decode.py",
            12,
            "unlisted-suite",
            Severity.ERROR,
            "registered to suite 'stage-c-test-4-gpu-b200-mamba', which is not in the CI allowlist",
            "add it to the allowlist in test/run_suite.py",
        ),
        Finding(
            "test/registered/test_dspark.py",
            None,
            "no-workflow",
            Severity.WARNING,
            "no workflow dispatches suite 'dspark'",
            "",
        ),
    )
    return Scenario("registration_findings", results(*GREEN), results(*GREEN), findings=findings)


def _trimmed() -> Scenario:
    failing = [red_hicache(f"test_many.py::test_failing_{i}") for i in range(3)]
    passing = [check_result(f"test_many.py::test_passing_{i:03d}") for i in range(300)]
    head = results(*failing, *passing, suite="many")
    return Scenario("trimmed_to_budget", head, results(*passing, suite="many"), budget=9000)


def _proof_tests() -> tuple[r.Results, r.Results, r.Results]:
    """A PR fixing DSPARK's cached overshoot adds four tests (seed PR 35293's proof by
    revert-then-red, done by the tool): head results, base results, the proof run."""
    dspark = check_result("test_dspark.py::test_decode_cache_hit", check="decode_cache_hit")
    reverted = structs.replace(
        dspark,
        status=r.Status.FAILED,
        kl_div=1.10e-01,
        exact=r.ExactMatch(tokens=4096, mismatched=1312),
        message="avg KL 1.10e-01 >= threshold 1e-09",
    )
    weak = check_result("test_dspark.py::test_match", check="match")
    blocked = red_hicache("test_hicache_mamba.py::test_multiturn", blocked_by=(BLOCKER,))
    crashed = check_result(
        "test_dspark.py::test_prefill_cache_hit",
        r.Status.ERROR,
        check="prefill_cache_hit",
        kl_div=None,
        exact=None,
        cache_hits=None,
        message="suite hicache-mamba: server exited with code 2 before /health answered: "
        "error: unrecognized arguments: --speculative-algorithm DSPARK",
    )
    fixed = check_result(crashed.id, check="prefill_cache_hit")
    head = results(dspark, weak, blocked, fixed, *GREEN)
    proof = results(reverted, weak, blocked, crashed, commit="0f9e8d7c6b5a")
    return head, results(*GREEN, commit="0f9e8d7c6b5a"), proof


def _proof_outcomes() -> Scenario:
    head, base, proof = _proof_tests()
    blockers = {BLOCKER: BlockerState.OPEN}
    return Scenario("proof_four_outcomes", head, base, blockers, proof=proof)


def _proof_strict() -> Scenario:
    head, base, proof = _proof_tests()
    blockers = {BLOCKER: BlockerState.OPEN}
    return Scenario(
        "proof_strict_unproven", head, base, blockers, Policy(proof_strict=True), proof=proof
    )


def _flaky() -> Scenario:
    """run --repeat 5: one test's repeats disagree in the last bits (each alone green)."""
    evidence = r.Repeats(
        count=5,
        positions=4096,
        changed=171,
        kl=(0.0, 0.0, 2.1e-14, 0.0, 0.0),
        cache_hits=(32, 32, 31, 32, 32),
        statuses=(r.Status.PASSED,) * 5,
        first_change="repeat 3 vs 1: sample 4, token 17: decode logprob "
        "-2.1864151711024498 vs -2.1864151711024493",
    )
    flaky = check_result(
        "test_hicache_mamba.py::test_two_turns",
        r.Status.FLAKY,
        kl_div=2.1e-14,
        exact=r.ExactMatch(4096, 3),
        cache_hits=r.CacheHits(31, 32, 0.9, 32),
        repeats=evidence,
        message="flaky: 5 repeats on one launch disagree; 171 changed positions (of 4096 "
        "compared); KL 0 .. 2.10e-14; cache hits 32, 32, 31, 32, 32; first: "
        + evidence.first_change,
    )
    head = results(flaky, *GREEN)
    return Scenario("flaky_repeats", head, results(*GREEN), policy=Policy(flaky=True))


def _history() -> Scenario:
    """Issue 28: main's last 20 runs, where the decode cache-hit ratio alternates 16/32 and
    32/32 and prefill KL is steady; the PR fails both, and `allow-known` lets the known
    flake through while the new failure gates."""
    runs = [
        (
            HistoryRun(history_runs.commit(i), history_runs.when(i), 900 + i),
            history_runs.main_run(i),
        )
        for i in range(history_runs.RUNS)
    ]
    built = build_history("main", runs)
    head = history_runs.pr_run("e" * 40)
    policy = Policy(FailOn.FAILURE, allow_known=True)
    return Scenario("history_known_and_new", head, runs[-1][1], policy=policy, history=built)


def _all_green() -> Scenario:
    """Issue 37's first outcome: every test passes, against a base that passed too."""
    return Scenario("all_green", results(*GREEN), results(*GREEN, commit="0f9e8d7c6b5a"))


SUITE_TESTS = ("decode_cache_hit", "match", "prefill_cache_hit", "multiturn")


def _unreachable(test_id: str, message: str, cause: r.Cause, hint: str) -> r.TestResult:
    return check_result(
        test_id,
        r.Status.ERROR,
        kl_div=None,
        kl_per_sample=(),
        exact=None,
        cache_hits=None,
        message=message,
        hint=hint,
        cause=cause,
        duration_s=0.0,
    )


def _dead_server() -> Scenario:
    """Issue 37: `run --base-url` at a port nobody listens on; eight tests, one cause."""
    message = "http://127.0.0.1:9 refused connections for 30 s: no server listens there"
    hint = "start the server first, or fix the host and port of --base-url"
    ids = [f"radix::{name}" for name in SUITE_TESTS] + [f"hicache::{n}" for n in SUITE_TESTS]
    head = results(*(_unreachable(i, message, r.Cause.RUNNER, hint) for i in ids))
    base = results(*(check_result(i) for i in ids), commit="0f9e8d7c6b5a")
    return Scenario("could_not_run_refused", head, base)


def _crashed_server() -> Scenario:
    """A server that died at start: its last words folded, its log a link to the artifact."""
    log = "/home/runner/work/_temp/kl-out/logs/radix.log"
    message = (
        "suite radix: the server exited with code 1: torch.OutOfMemoryError: CUDA out of "
        f"memory. Tried to allocate 2.00 GiB\nlast lines of {log}:\n"
        "Loading safetensors checkpoint shards: 100% 4/4\n"
        "Capture cuda graph bs [1, 2, 4, 8]\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    )
    hint = f"the server's own words on why it stopped are in {log}"
    ids = [f"radix::{name}" for name in SUITE_TESTS]
    head = results(*(_unreachable(i, message, r.Cause.SERVER, hint) for i in ids), suite="radix")
    base = results(*(check_result(i) for i in ids), suite="radix", commit="0f9e8d7c6b5a")
    return Scenario("could_not_run_server_died", head, base)


def _regression() -> Scenario:
    """Issue 37: a cache fault makes one test red that was green on the base."""
    head = results(red_hicache("test_hicache_mamba.py::test_multiturn"), *GREEN)
    base = results(
        check_result("test_hicache_mamba.py::test_multiturn"), *GREEN, commit="0f9e8d7c6b5a"
    )
    return Scenario("regression_cache_fault", head, base)


def _not_exercised() -> Scenario:
    """A test whose stated server fact did not hold: green numbers, yet not what it claims."""
    fact = r.Fact("speculative_algorithm", '"DSPARK"', r.FactState.DIFFERS, reported="null")
    unproven = check_result("test_dspark.py::test_spec_decode_cache_hit", facts=(fact,))
    head = results(unproven, *GREEN, suite="dspark")
    base = results(check_result(unproven.id), *GREEN, suite="dspark", commit="0f9e8d7c6b5a")
    return Scenario("not_exercised", head, base)


def _not_judged() -> Scenario:
    """`kl-bitexact pytest` of sglang's files on the reference engine: tests skipped for a
    path the engine lacks are not judged (never red, never green), one of them run on the
    base; a red test beside them gets pytest's command to run it again."""
    real_model = "not judged on the reference engine: needs a real model (few_shot_gsm8k)"
    flag = "not judged on the reference engine: needs --enable-int8-mamba-checkpoint"
    skipped = r.Status.SKIPPED
    unjudged = (
        r.TestResult("test_gsm8k.py::TestEval::test_gsm8k", "pytest", skipped, message=real_model),
        r.TestResult("test_gsm8k.py::TestEval::test_mmlu", "pytest", skipped, message=real_model),
        r.TestResult("test_int8.py::TestInt8::test_decode_kl", "pytest", skipped, message=flag),
    )
    red = red_hicache("test_hicache.py::TestHiCache::test_decode_kl[page-128]")
    head = results(*unjudged, red, *GREEN, suite="test_hicache.py")
    suite = structs.replace(
        head.suites[0], file=None, rerun=("kl-bitexact", "pytest", "--exact", "--")
    )
    head = structs.replace(head, suites=(suite,))
    ran = check_result(unjudged[2].id)
    base = results(
        ran, check_result(red.id), *GREEN, suite="test_hicache.py", commit="0f9e8d7c6b5a"
    )
    return Scenario("not_judged", head, base)


SCENARIOS: tuple[Callable[[], Scenario], ...] = (
    _all_green,
    _regression,
    _not_exercised,
    _not_judged,
    _dead_server,
    _crashed_server,
    _expected_red,
    _blocker_merged,
    _too_few_hits,
    _revert_then_red,
    _baseline_unavailable,
    _local_report,
    _nothing_ran,
    _hostile,
    _findings,
    _trimmed,
    _proof_outcomes,
    _proof_strict,
    _flaky,
    _history,
)


def all_scenarios() -> list[Scenario]:
    return [make() for make in SCENARIOS]


def golden_path(scenario: Scenario) -> Path:
    return GOLDEN_DIR / f"{scenario.name}.md"
