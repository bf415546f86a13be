"""Number formats shared by the terminal, the checks' messages and every rendering (pure)."""

from __future__ import annotations

import math

from kl_bitexact.results.aggregate import KL_ROUNDING
from kl_bitexact.results.model import CacheHits

MISSING = "-"  # a value the test did not produce


def plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def shown_kl(value: float | None) -> float | None:
    """A KL as people see it: k3's rounding below 0 (within `KL_ROUNDING`) is 0, as sglang
    would clamp it; results.json keeps the raw value."""
    if value is not None and -KL_ROUNDING <= value < 0:
        return 0.0
    return value


def fmt_kl(value: float | None) -> str:
    """Exact zero as `0` (bit-exact is the point), anything else in 3 significant digits;
    never a negative KL from rounding (`shown_kl`)."""
    value = shown_kl(value)
    if value is None:
        return MISSING
    return "0" if value == 0 else f"{value:.2e}"


def hits_needed(hits: CacheHits) -> int:
    """The fewest hits that pass (`aggregate.enough_hits`: all of them, or more than the
    minimum share), as a count a reader can hold the observed one against."""
    return min(hits.total, math.floor(hits.min_ratio * hits.total) + 1)


def hits_short(hits: CacheHits) -> str:
    """`14/16 (up to 16 predicted, pass >=9)`: observed of total, against the prediction and
    the minimum, so a pass below the prediction reads as what it is (issue 37)."""
    predicted = "? predicted" if hits.expected is None else f"up to {hits.expected} predicted"
    return f"{hits.hit}/{hits.total} ({predicted}, pass >={hits_needed(hits)})"


def hits_long(hits: CacheHits) -> str:
    """`14/16 hit; the geometry lets up to 16 hit; a pass needs 9 (more than 0.5 of 16)`."""
    predicted = (
        "no prediction" if hits.expected is None else f"the geometry lets up to {hits.expected} hit"
    )
    need = f"a pass needs {hits_needed(hits)} (more than {hits.min_ratio:g} of {hits.total})"
    return f"{hits.hit}/{hits.total} hit; {predicted}; {need}"
