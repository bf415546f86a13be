"""Recovering metrics from the lines sglang's KL helpers print, in both of its wordings."""

from __future__ import annotations

from kl_bitexact.ingest.sglang_output import HitCount, recover

NEW_DECODE_FAIL = """\
Running test_input_output_logprobs_match_decode_cache_hit with 32 prompts
Flush Cache and First turn: Prefill + Decode to cache decode ...
Decode cache miss for prompt 0, skipping
Decode cache miss for prompt 2, skipping
"""

OLD_PREFILL_PASS = """\
Running test_input_output_logprobs_match_prefill_cache_hit with  48 prompts
Flush Cache and Prefill to cache the input ...
Prefill cache miss for prompt 5, skipping this prompt
Prefill cache miss for prompt 9, skipping this prompt
Flush Cache and run prefill to get input logprobs ...
kl_divs=[0.0, 1.5e-10, 0.0]
avg_kl_div=5e-11
ACC_THRESHOLDS={'kl_div': 0.0025}
"""


def test_new_wording_failure_message_gives_hits():
    failure = "AssertionError: Too few decode cache hits: 16/32"
    (block,) = recover(NEW_DECODE_FAIL, failure).blocks
    assert block.check == "decode_cache_hit"
    assert block.cache_hits() == HitCount(16, 32)
    assert block.kl_div is None and block.kl_per_sample is None


def test_misses_count_when_no_assertion_fired():
    (block,) = recover(OLD_PREFILL_PASS).blocks
    assert block.check == "prefill_cache_hit"
    assert block.cache_hits() == HitCount(46, 48)
    assert block.kl_per_sample == (0.0, 1.5e-10, 0.0)
    assert block.kl_div == 5e-11
    assert block.kl_threshold == 0.0025


def test_old_wording_of_too_few():
    failure = (
        "E   AssertionError: Too few prefill cache hits, len(new_input_ids)=10, len(input_ids)=48"
    )
    (block,) = recover(OLD_PREFILL_PASS, failure).blocks
    assert block.cache_hits() == HitCount(10, 48)


def test_numpy2_scalars_in_kl_divs():
    output = "kl_divs=[np.float64(0.0), np.float64(2.5e-05)]\navg_kl_div=1.25e-05\n"
    (block,) = recover(output).blocks
    assert block.check == "match"
    assert block.kl_per_sample == (0.0, 2.5e-05)
    assert block.kl_div == 1.25e-05


def test_threshold_comes_from_the_rendered_message_not_the_quoted_source():
    failure = (
        "    f\"avg_kl_div={avg_kl_div} > threshold={ACC_THRESHOLDS[model_name]['kl_div']} \"\n"
        "E   AssertionError: avg_kl_div=0.11 > threshold=1e-09 for m test_x\n"
    )
    (block,) = recover("kl_divs=[0.11]\navg_kl_div=0.11\n", failure).blocks
    assert block.kl_threshold == 1e-09
    assert block.kl_div == 0.11
    assert block.warnings == ()


def test_older_assert_wording_gives_threshold_and_value():
    failure = "AssertionError: avg_kl_div=0.2 is greater than threshold=0.002 for m helper"
    (block,) = recover("Running test_input_output_logprobs_match with  4 prompts", failure).blocks
    assert (block.kl_div, block.kl_threshold) == (0.2, 0.002)


def test_absent_metrics_stay_absent():
    assert recover("Flush Cache and Running generation to get output logprobs ...\n").blocks == ()
    (block,) = recover("Running test_input_output_logprobs_match with 8 prompts").blocks
    assert block.kl_div is None and block.cache_hits() is None and block.kl_threshold is None


def test_truncated_kl_divs_line_is_dropped_with_a_warning():
    (block,) = recover("kl_divs=[np.float64(0.0), np.float64(1.2").blocks
    assert block.kl_per_sample is None
    assert "cut off" in block.warnings[0]


def test_non_finite_values_are_not_numbers():
    (block,) = recover("kl_divs=[nan, 0.0]\navg_kl_div=nan\n").blocks
    assert block.kl_per_sample is None and block.kl_div is None
    assert len(block.warnings) == 2


def test_radix_cache_disabled_is_recorded():
    (block,) = recover("Radix cache is disabled, skipping test\n").blocks
    assert block.cache_disabled and block.cache_hits() is None
    old = "Radix cache is disabled, skipping test_input_output_logprobs_match_decode_cache_hit test"
    (block,) = recover(old).blocks
    assert block.check == "decode_cache_hit" and block.cache_disabled


def test_each_helper_call_is_its_own_block():
    output = (
        "Running test_input_output_logprobs_match with 2 prompts\n"
        "kl_divs=[0.0, 0.0]\navg_kl_div=0.0\n"
        "Running test_input_output_logprobs_match_decode_cache_hit with 2 prompts\n"
        "kl_divs=[0.5, 0.0]\navg_kl_div=0.25\n"
    )
    first, second = recover(output).blocks
    assert (first.check, first.kl_div) == ("match", 0.0)
    assert (second.check, second.kl_div, second.cache_hits()) == (
        "decode_cache_hit",
        0.25,
        HitCount(2, 2),
    )
