"""Hit predictions and the server's cache budget: LRU eviction under max_total_tokens costs
hits on a healthy server (sglang's ported SWA test: 29/32), and the result says so."""

from __future__ import annotations

from kl_bitexact.results.model import Status
from kl_bitexact.run.checks import run_check
from kl_bitexact.run.checks.metrics import Geometry, eviction_warning
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


def test_a_host_tier_that_holds_every_sample_says_nothing(reference_server) -> None:
    # The bundled suite's hicache server (device 512, host 2x) warned on every clean run:
    # the host tier, where evicted pages wait for their hit, was left out of the budget.
    hicache = reference_server(
        "--enable-deterministic-inference",
        "--max-total-tokens",
        "640",
        "--enable-hierarchical-cache",
    )
    result = run_check(SglangEngine(hicache.url), SPEC)
    assert result.status is Status.PASSED, result.message
    assert result.cache_hits is not None and result.cache_hits.hit == 8
    assert not [w for w in result.warnings if w.startswith("cache budget")], result.warnings


def test_the_capacity_counts_the_host_tier_and_an_unknown_one_warns_about_nothing() -> None:
    info = {"max_total_tokens": 512, "enable_hierarchical_cache": True, "hicache_ratio": 2.0}
    geometry = Geometry.from_server_info(info)
    assert geometry.cache_capacity == 512 + 1024
    assert eviction_warning(1240, geometry) == ""  # the bundled suite's decode_cache_hit
    assert "(with its host tier at 2x: 1536 in all)" in eviction_warning(1600, geometry)
    in_bytes = {**info, "hicache_size": 64}  # gigabytes: tokens unknown
    assert Geometry.from_server_info(in_bytes).cache_capacity is None
    assert Geometry.from_server_info({"max_total_tokens": 512}).cache_capacity == 512
