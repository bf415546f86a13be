"""Hit predictions and the server's cache budget: LRU eviction under max_total_tokens costs
hits on a healthy server (sglang's ported SWA test: 29/32), and the result says so."""

from __future__ import annotations

from kl_bitexact.results.model import Status
from kl_bitexact.run.checks import run_check
from kl_bitexact.run.engines.sglang import SglangEngine
from kl_bitexact.suite.model import CheckName, TestSpec

SPEC = TestSpec(
    name="decode",
    check=CheckName.DECODE_CACHE_HIT,
    samples=8,
    prompt_tokens=(100, 160),
    max_new_tokens=16,
    kl_threshold=1e-9,
    min_cache_hit_ratio=0.5,
    vocab_size=320,
)


def test_a_budget_too_small_for_the_samples_is_named_with_the_flag(reference_server) -> None:
    tight = reference_server("--enable-deterministic-inference", "--max-total-tokens", "640")
    result = run_check(SglangEngine(tight.url), SPEC)
    assert result.cache_hits is not None and result.cache_hits.hit < result.cache_hits.total
    [warning] = [w for w in result.warnings if w.startswith("cache budget")]
    assert "max_total_tokens is 640" in warning and "raise --max-total-tokens" in warning
    # evicted samples are misses, not wrong logprobs: what did hit is exact
    assert result.kl_div == 0.0


def test_a_budget_that_holds_every_sample_says_nothing(reference_server) -> None:
    roomy = reference_server("--enable-deterministic-inference")
    result = run_check(SglangEngine(roomy.url), SPEC)
    assert result.status is Status.PASSED
    assert result.cache_hits is not None and result.cache_hits.hit == 8
    assert not [w for w in result.warnings if w.startswith("cache budget")]
