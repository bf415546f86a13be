"""The pure numbers: k3 as sglang computes it, exact counts, divergence hints, geometry."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kl_bitexact.run.checks import metrics
from kl_bitexact.run.checks.metrics import Geometry, Sample


def sglang_k3(input_lp, output_lp):
    """sglang's compare_kl_divergence, per sample (kl_test_utils.py)."""
    logr = np.array(input_lp) - np.array(output_lp)
    return float(np.mean((np.exp(logr) - 1) - logr))


logprobs = st.lists(st.floats(-30, 0, allow_nan=False), min_size=1, max_size=40)


@given(logprobs, st.data())
def test_k3_equals_sglang_bit_for_bit(decode, data):
    replay = data.draw(st.lists(st.floats(-30, 0), min_size=len(decode), max_size=len(decode)))
    assert metrics.k3(decode, replay) == sglang_k3(replay, decode)


@given(st.lists(st.floats(-30, 0, allow_nan=False) | st.just(-math.inf), min_size=1, max_size=40))
def test_equal_logprobs_give_sglang_s_value_on_the_path_without_numpy(decode):
    """k3 skips numpy when every pair is equal (a bit-exact sample): the same 0.0 that
    sglang's arithmetic gives, -0.0 beside 0.0 included."""
    replay = [-value if value == 0 else value for value in decode]
    expected = sglang_k3(replay, decode) if all(map(math.isfinite, decode)) else 0.0
    assert metrics.k3(decode, replay) == expected == 0.0
    assert math.copysign(1.0, metrics.k3(decode, replay)) == 1.0


def test_identical_logprobs_give_exactly_zero_even_with_minus_infinity():
    lps = [-1.5, -math.inf, -0.25]
    assert metrics.k3(lps, lps) == 0.0
    assert metrics.mismatched(lps, lps) == 0


def test_one_sided_infinity_saturates_to_a_finite_failing_value():
    value = metrics.k3([-1.0, -math.inf], [-1.0, -2.0])
    assert value == metrics.KL_INFINITE and math.isfinite(value)
    assert metrics.average([value, value]) == metrics.KL_INFINITE
    json.dumps(value, allow_nan=False)


def test_one_ulp_is_far_under_the_gate_but_counted_as_mismatch():
    a = -2.0
    b = math.nextafter(a, 0.0)
    assert 0 <= metrics.k3([a], [b]) < 1e-20
    assert metrics.mismatched([a, a], [b, a]) == 1


def test_first_divergence_points_at_the_restored_prefix_end():
    sample = Sample(
        index=3,
        prompt_len=100,
        cached_tokens=128,
        decode=(-1.0,) * 40,
        replay=(-1.0,) * 28 + (-1.1,) * 12,
    )
    divergence = metrics.first_divergence(sample, Geometry(page_size=64, track_interval=128))
    assert divergence is not None
    assert (divergence.sample, divergence.token_index) == (3, 28)
    assert "diverges at position 128" in divergence.hint
    assert "first token after the restored prefix (128 cached)" in divergence.hint
    assert "on a checkpoint boundary" in divergence.hint


def test_no_divergence_for_identical_samples():
    sample = Sample(0, 10, 0, (-1.0, -2.0), (-1.0, -2.0))
    assert metrics.first_divergence(sample, Geometry()) is None


def test_geometry_from_server_info():
    info = {
        "page_size": 128,
        "mamba_track_interval": 256,
        "disable_radix_cache": False,
        "speculative_algorithm": "DSPARK",
        "speculative_num_draft_tokens": 4,
    }
    geometry = Geometry.from_server_info(info)
    assert geometry == Geometry(page_size=128, track_interval=256, speculative_block=4)
    assert geometry.resume_step == 256
    assert not Geometry.from_server_info({"disable_radix_cache": True}).radix_cache


def test_misaligned_interval_predicts_about_half_the_decode_hits():
    rng = np.random.default_rng(0)
    lengths = rng.integers(500, 1500, size=400)
    aligned, misaligned = Geometry(128, 128), Geometry(128, 256)
    hits = [
        sum(metrics.decode_hit_possible(int(n), 130, g) for n in lengths)
        for g in (aligned, misaligned)
    ]
    assert hits[0] == 400
    assert 0.4 < hits[1] / 400 < 0.6
    warning = metrics.geometry_warning(hits[1], 400, 0.99, misaligned)
    assert "can hit" in warning and "--mamba-track-interval 128" in warning
    assert "cannot pass" in warning
    assert metrics.geometry_warning(400, 400, 0.99, aligned) == ""


def test_prefill_hit_needs_a_whole_resume_step():
    assert metrics.prefill_hit_possible(129, Geometry(128))
    assert not metrics.prefill_hit_possible(128, Geometry(128))
    assert not metrics.prefill_hit_possible(1000, Geometry(radix_cache=False))


@pytest.mark.parametrize(
    ("hit", "total", "ratio", "ok"),
    [
        (16, 32, 0.5, False),  # PR 34405's "Too few decode cache hits: 16/32"
        (17, 32, 0.5, True),
        (31, 32, 0.99, False),
        (32, 32, 1.0, True),
        (0, 0, 0.0, False),
    ],
)
def test_enough_hits_is_sglangs_strict_rule(hit, total, ratio, ok):
    assert metrics.enough_hits(hit, total, ratio) is ok


def test_speculative_overshoot_risk_is_predicted_only_near_a_boundary():
    geometry = Geometry(page_size=16, track_interval=16, speculative_block=4)
    # turn 1 consumed 40 + 8 - 1 = 47 tokens; overshoot up to 51 crosses 48
    assert metrics.overshoot_may_miss(40, 8, geometry)
    assert not metrics.overshoot_may_miss(40, 2, geometry)  # 41..45 crosses nothing
    assert not metrics.overshoot_may_miss(40, 8, Geometry(16, 16))


def test_hybrid_prefill_resumes_only_on_chunk_boundaries():
    info = {"page_size": 16, "mamba_track_interval": 16, "chunked_prefill_size": 64}
    geometry = Geometry.from_server_info(info)
    assert geometry.prefill_step == 64 and geometry.resume_step == 16
    assert not metrics.prefill_hit_possible(64, geometry)
    assert metrics.prefill_hit_possible(65, geometry)
    # attention-only servers (no track interval) resume on any page
    assert (
        Geometry.from_server_info({"page_size": 16, "chunked_prefill_size": 64}).prefill_step == 16
    )
