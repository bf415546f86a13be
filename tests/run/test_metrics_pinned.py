"""The pure numbers pinned to exact values: what each rule of metrics.py promises, stated as
full expected outputs (the mutation run of issue 22 showed which rules no test held)."""

from __future__ import annotations

import math
import statistics
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kl_bitexact.results.model import Divergence
from kl_bitexact.run.checks import metrics
from kl_bitexact.run.checks.metrics import Geometry, Sample

finite_kl = st.floats(0, 1e6, allow_nan=False, allow_infinity=False)


# --- server geometry --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("info", "expected"),
    [
        ({}, Geometry(1, None, 1, True, None)),
        # Draft tokens count only when a speculative algorithm is on.
        ({"speculative_num_draft_tokens": 4}, Geometry()),
        (
            {"speculative_algorithm": "EAGLE", "speculative_num_draft_tokens": 4},
            Geometry(1, None, 4),
        ),
        ({"disable_radix_cache": True}, Geometry(radix_cache=False)),
        # An interval of 1 is a real setting; 0, a bool or a string is no setting at all.
        ({"mamba_track_interval": 1}, Geometry(track_interval=1)),
        ({"mamba_track_interval": 0}, Geometry()),
        ({"page_size": True, "mamba_track_interval": True}, Geometry()),
        ({"page_size": "64"}, Geometry()),
        (
            {"page_size": 16, "mamba_track_interval": 32, "chunked_prefill_size": 64},
            Geometry(16, 32, 1, True, 64),
        ),
        # The prefill chunk matters only for hybrid (recurrent-state) models.
        ({"page_size": 16, "chunked_prefill_size": 64}, Geometry(page_size=16)),
    ],
)
def test_geometry_from_server_info_table(info, expected):
    assert Geometry.from_server_info(info) == expected


# --- k3 and average ---------------------------------------------------------------------


def float64_k3(decode, replay):
    """The k3 estimator written out in float64, one position at a time (a reference)."""
    terms = [
        0.0 if a == b else math.exp(b - a) - 1 - (b - a)
        for a, b in zip(decode, replay, strict=True)
    ]
    return sum(terms) / len(terms)


@given(st.lists(st.tuples(st.floats(-20, 0), st.floats(-20, 0)), min_size=1, max_size=30))
def test_k3_agrees_with_a_float64_reference(pairs):
    decode, replay = [a for a, _ in pairs], [b for _, b in pairs]
    assert metrics.k3(decode, replay) == pytest.approx(
        float64_k3(decode, replay), rel=1e-9, abs=1e-15
    )


def test_k3_of_no_positions_is_zero():
    assert metrics.k3([], []) == 0.0


def test_k3_overflow_saturates_silently():
    # exp(1000) overflows: the value saturates to the finite failing maximum, and numpy's
    # overflow warning (which would flood a CI log once per sample) is not raised.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert metrics.k3([-1000.0], [0.0]) == metrics.KL_INFINITE
        assert metrics.k3([0.0, -np.inf], [0.0, -1.0]) == metrics.KL_INFINITE
        assert metrics.k3([-1.0], [np.nan]) == metrics.KL_INFINITE


@given(st.lists(finite_kl, min_size=1, max_size=50))
def test_average_is_the_plain_mean(values):
    assert metrics.average(values) == sum(values) / len(values)
    assert metrics.average(values) == pytest.approx(statistics.fmean(values), rel=1e-12)


def test_average_of_finite_values_is_not_saturated():
    assert metrics.average([1.0, 3.0]) == 2.0
    assert metrics.average([0.0]) == 0.0


def test_average_saturates_only_on_overflow():
    big = metrics.KL_INFINITE
    assert metrics.average([big, big]) == metrics.KL_INFINITE
    assert metrics.average([big / 2, big / 2]) == big / 2


# --- hits and exact counts --------------------------------------------------------------


@pytest.mark.parametrize(
    ("hit", "total", "ratio", "enough"),
    [
        (1, 1, 0.99, True),  # one sample, hit: every sample hit
        (0, 0, 0.0, False),  # nothing measured is never enough
        (5, 10, 0.5, False),  # sglang's strict `>`
        (6, 10, 0.5, True),
        (31, 32, 1.0, False),
        (32, 32, 1.0, True),
    ],
)
def test_enough_hits_table(hit, total, ratio, enough):
    assert metrics.enough_hits(hit, total, ratio) is enough


def test_mismatched_refuses_sequences_of_different_lengths():
    with pytest.raises(ValueError):
        metrics.mismatched([-1.0, -2.0], [-1.0])


def test_first_divergence_refuses_sequences_of_different_lengths():
    with pytest.raises(ValueError):
        metrics.first_divergence(Sample(0, 4, 0, (-1.0, -2.0), (-1.0,)), Geometry())


# --- where it diverges ------------------------------------------------------------------


def test_first_divergence_is_the_whole_record():
    sample = Sample(
        2, prompt_len=10, cached_tokens=8, decode=(-1.0, -2.0, -3.0), replay=(-1.0, -2.5, -3.0)
    )
    assert metrics.first_divergence(sample, Geometry(page_size=4)) == Divergence(
        sample=2,
        token_index=1,
        cached_tokens=8,
        decode_logprob=-2.0,
        replay_logprob=-2.5,
        hint="diverges at position 11; +3 from the end of the restored prefix (8 cached); "
        "3 after the page boundary at 8 (page size 4)",
    )


def test_first_divergence_at_the_first_token_says_the_cause_may_be_earlier():
    sample = Sample(0, prompt_len=6, cached_tokens=None, decode=(-np.inf,), replay=(-0.5,))
    divergence = metrics.first_divergence(sample, Geometry())
    assert divergence == Divergence(
        sample=0,
        token_index=0,
        cached_tokens=None,
        decode_logprob=None,  # -inf has no JSON form: recorded as absent
        replay_logprob=-0.5,
        hint="diverges at position 6 (the first decoded token: the cause may be earlier)",
    )


@pytest.mark.parametrize(
    ("position", "cached", "geometry", "hint"),
    [
        (100, None, Geometry(), "diverges at position 100"),
        (5, 0, Geometry(), "diverges at position 5; with no cached prefix"),
        (
            5,
            None,
            Geometry(page_size=2),
            "diverges at position 5; 1 after the page boundary at 4 (page size 2)",
        ),
        (
            8,
            8,
            Geometry(page_size=2),
            "diverges at position 8; = first token after the restored prefix (8 cached); "
            "on a page boundary (page size 2)",
        ),
        (
            7,
            8,
            Geometry(),
            "diverges at position 7; -1 from the end of the restored prefix (8 cached)",
        ),
        (
            130,
            128,
            Geometry(page_size=64, track_interval=128),
            "diverges at position 130; +2 from the end of the restored prefix (128 cached); "
            "2 after the page boundary at 128 (page size 64); "
            "2 after the checkpoint boundary at 128 (checkpoint size 128)",
        ),
    ],
)
def test_boundary_hint_table(position, cached, geometry, hint):
    assert metrics.boundary_hint(position, cached, geometry) == hint


# --- how many samples can hit -----------------------------------------------------------


def test_decode_hit_needs_a_resume_position_past_prompt_plus_one():
    step16 = Geometry(page_size=16)
    # last state 15: no boundary after the prompt; 16 reached only with a longer output.
    assert not metrics.decode_hit_possible(14, 2, step16)
    assert metrics.decode_hit_possible(14, 3, step16)
    # A boundary exactly at prompt + 1 is not a hit (sglang counts > prompt + 1).
    assert not metrics.decode_hit_possible(15, 5, step16)
    assert metrics.decode_hit_possible(15, 18, step16)
    assert not metrics.decode_hit_possible(15, 18, Geometry(page_size=16, radix_cache=False))


def test_overshoot_with_a_two_token_speculative_block():
    geometry = Geometry(page_size=16, speculative_block=2)
    # Last state 14: two more tokens reach 16, a checkpoint the next turn cannot use.
    assert metrics.overshoot_may_miss(10, 5, geometry)
    # Last state 13: the block stays below the boundary.
    assert not metrics.overshoot_may_miss(10, 4, geometry)
    assert not metrics.overshoot_may_miss(10, 5, Geometry(page_size=16))


def test_prefill_hit_possible_table():
    assert metrics.prefill_hit_possible(9, Geometry(page_size=8))
    assert not metrics.prefill_hit_possible(8, Geometry(page_size=8))
    assert not metrics.prefill_hit_possible(100, Geometry(page_size=8, radix_cache=False))


@pytest.mark.parametrize(
    ("expected", "total", "ratio", "geometry", "warning"),
    [
        (4, 4, 0.5, Geometry(page_size=16), ""),
        (0, 0, 0.5, Geometry(page_size=16), ""),
        (
            0,
            1,
            0.5,
            Geometry(page_size=16),
            "server geometry: only 0/1 (~0%) samples can hit (below min_cache_hit_ratio: this "
            "check cannot pass); use longer prompts or more max_new_tokens relative to the "
            "page size",
        ),
        (
            3,
            4,
            0.5,
            Geometry(page_size=16, track_interval=24),
            "server geometry: only 3/4 (~75%) samples can hit; "
            "set --mamba-track-interval 16 (a multiple of --page-size 16)",
        ),
        (
            11,
            24,
            0.99,
            Geometry(page_size=16, track_interval=32),
            "server geometry: only 11/24 (~46%) samples can hit (below min_cache_hit_ratio: this "
            "check cannot pass); set --mamba-track-interval 16 to checkpoint on every page",
        ),
        (
            1,
            2,
            0.5,
            Geometry(page_size=16, track_interval=16),
            "server geometry: only 1/2 (~50%) samples can hit (below min_cache_hit_ratio: this "
            "check cannot pass); use longer prompts or more max_new_tokens relative to the "
            "page size",
        ),
    ],
)
def test_geometry_warning_table(expected, total, ratio, geometry, warning):
    assert metrics.geometry_warning(expected, total, ratio, geometry) == warning


# --- rules the second mutation run showed unheld ---------------------------------------


def test_geometry_reads_the_servers_token_budget():
    assert Geometry.from_server_info({"max_total_tokens": 4096}).token_budget == 4096
    assert Geometry.from_server_info({"max_total_tokens": 0}).token_budget is None


def test_a_position_one_side_did_not_report_is_not_compared():
    sample = Sample(0, 4, None, (-1.0, None, -3.0, -4.0), (-1.0, -2.0, None, -4.0))
    assert sample.compared() == ((0, -1.0, -1.0), (3, -4.0, -4.0))
    assert sample.not_reported == 2


def test_k3_of_identical_minus_infinities_warns_nothing():
    # -inf - -inf is NaN inside numpy before the identical positions are set to 0: its
    # "invalid value" warning would be noise on every sample with a forbidden token.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert metrics.k3([-math.inf, -1.0], [-math.inf, -1.5]) == pytest.approx(
            float64_k3([-1.0], [-1.5]) / 2
        )


def test_held_tokens_counts_whole_pages_left_behind_plus_working_tokens():
    # 1 page for 10 tokens, 2 pages for 17 (page 16), plus what the reusing requests allocate
    assert metrics.held_tokens([10, 17], [5, 7], 16) == 3 * 16 + 12
    assert metrics.held_tokens([], [], 16) == 0


def test_eviction_warning_only_over_the_budget_and_naming_the_flag():
    geometry = Geometry(token_budget=100)
    assert metrics.eviction_warning(100, geometry) == ""
    assert metrics.eviction_warning(10**6, Geometry()) == ""
    warning = metrics.eviction_warning(101, geometry)
    assert "about 101 tokens" in warning and "max_total_tokens is 100" in warning
    assert "raise --max-total-tokens above 101" in warning
