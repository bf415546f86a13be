"""How per-sample numbers become a test's verdict inputs, as sglang's helpers compute them.

Shared by the checks (`run.checks`, which measure) and by whatever re-derives a verdict
from recorded numbers (the pytest plugin's recorder; the gate). Kept here, free of numpy, so
that `report` and `publish` never import the checks, the engines and numpy for them.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence

# JSON has no infinity (results.dumps uses allow_nan=False). A logprob of -inf on one side
# only is an infinite divergence; it is recorded as the largest finite float, which fails
# every threshold and survives a JSON round trip.
KL_INFINITE = sys.float_info.max
# k3 is (exp(r) - 1) - r averaged: for |r| near 0 the rounding of exp leaves it a few ulp of 1
# below zero at worst (-2.89e-19 seen). Anything further below 0 is no rounding.
KL_ROUNDING = 1e-12


def average(values: Sequence[float]) -> float:
    """Unweighted mean over samples, as sglang; saturates instead of overflowing."""
    total = sum(values) / len(values)  # plain left-to-right sum, as sglang
    return total if math.isfinite(total) else KL_INFINITE


def enough_hits(hit: int, total: int, min_ratio: float) -> bool:
    """sglang's strict `hit > ratio * total`, except that all samples hitting always
    suffices (so a ratio of 1.0 is satisfiable)."""
    return total > 0 and (hit == total or hit > min_ratio * total)
