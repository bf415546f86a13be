"""The issue-28 scenario: 20 runs of main where one test's decode cache-hit ratio
alternates (16/32, 32/32: sglang PR 34405's track interval against the page size) and
another is steady, and a PR run on which both fail."""

from __future__ import annotations

from kl_bitexact.results import io as results_io
from kl_bitexact.results import model as r

FLAKY_ID = "hicache::decode_cache_hit_ratio"
STEADY_ID = "hicache::prefill_kl"
SUITE = "hicache-mamba"
RUNS = 20


def commit(index: int) -> str:
    """The commit of main's run `index` (0 = oldest): a distinct 40-digit hex each."""
    return f"{index + 1:02x}" * 20


def when(index: int) -> str:
    """The creation time of main's run `index`: an hour apart, oldest first."""
    return f"2026-05-{1 + index // 24:02d}T{index % 24:02d}:00:00Z"


def hits_test(test_id: str, hit: int) -> r.TestResult:
    status = r.Status.PASSED if hit == 32 else r.Status.FAILED
    return r.TestResult(
        id=test_id,
        check="decode_cache_hit",
        status=status,
        kl_div=0.0,
        kl_threshold=1e-9,
        exact=r.ExactMatch(tokens=1024, mismatched=0),
        cache_hits=r.CacheHits(hit=hit, total=32, min_ratio=0.9, expected=32),
        message="" if hit == 32 else f"{hit}/32 cache hits, not more than 0.9 x 32",
    )


def kl_test(test_id: str, red: bool) -> r.TestResult:
    return r.TestResult(
        id=test_id,
        check="match",
        status=r.Status.FAILED if red else r.Status.PASSED,
        kl_div=3.2e-4 if red else 0.0,
        kl_threshold=1e-9,
        exact=r.ExactMatch(tokens=1024, mismatched=211 if red else 0),
    )


def results(*tests: r.TestResult, sha: str | None = None, when: str | None = None) -> r.Results:
    run = r.RunInfo(commit=sha, ref="refs/heads/main", started_at=when, finished=True)
    return r.Results(run=run, suites=(r.SuiteResult(SUITE, r.ServerInfo("reference"), tests),))


def main_run(index: int) -> r.Results:
    """Run `index` of main: the flaky test hits 16/32 on odd runs (first at run 1)."""
    hit = 16 if index % 2 else 32
    return results(
        hits_test(FLAKY_ID, hit),
        kl_test(STEADY_ID, red=False),
        sha=commit(index),
        when=when(index),
    )


def main_run_bytes(index: int) -> bytes:
    return results_io.dumps(main_run(index)).encode()


def pr_run(sha: str = "e" * 40) -> r.Results:
    """The PR's head: both tests fail."""
    return results(hits_test(FLAKY_ID, 16), kl_test(STEADY_ID, red=True), sha=sha)
