"""multiturn's per-hit assertions: structured records, one message per record."""

from __future__ import annotations

from kl_bitexact.run.checks.multiturn import Violation, violations
from kl_bitexact.run.engines.base import Generation


def _cached(*counts: int | None) -> list[Generation]:
    return [Generation((1,), (0.0,), cached, 64) for cached in counts]


def test_each_sample_outside_its_range_is_one_record() -> None:
    expected = [(32, 32), (32, 48), (16, None), (32, 32)]
    found = violations(_cached(32, 50, 8, None), expected, turn=3)
    assert found == [
        Violation(sample=1, turn=3, cached=50, expected=(32, 48)),
        Violation(sample=2, turn=3, cached=8, expected=(16, None)),
        Violation(sample=3, turn=3, cached=0, expected=(32, 32)),  # not reported: 0
    ]
    assert [str(v) for v in found] == [
        "sample 1: cached_tokens 50, expected 32..48 (turn 3)",
        "sample 2: cached_tokens 8, expected >= 16 (turn 3)",
        "sample 3: cached_tokens 0, expected 32 (turn 3)",
    ]


def test_samples_inside_their_ranges_are_no_violation() -> None:
    assert violations(_cached(32, 40, 99), [(32, 32), (32, 48), (16, None)], turn=1) == []
