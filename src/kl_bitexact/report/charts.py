"""Small mermaid charts for the report (GitHub renders mermaid code blocks).

Only numbers and fixed words go into a chart: mermaid has its own syntax, and no
untrusted string is needed to draw a bar per sample.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

MAX_BARS = 64  # beyond this a bar chart is unreadable in a comment


def per_sample_kl(values: Sequence[float]) -> str | None:
    """A bar chart of KL per sample, or None when a chart would say nothing.

    Bars are scaled by a power of ten so mermaid never sees scientific notation, and
    the axis says the scale.
    """
    shown = list(values[:MAX_BARS])
    if len(shown) < 2 or not all(math.isfinite(v) for v in shown) or max(shown) <= 0:
        return None
    exponent = math.floor(math.log10(max(shown)))
    # Below float's normal range 10**exponent underflows to 0 (5e-324 gives 1e-324):
    # divide by the power in two steps that each stay representable.
    half = exponent // 2
    bars = ", ".join(f"{value / 10.0**half / 10.0 ** (exponent - half):.3f}" for value in shown)
    samples = ", ".join(str(index) for index in range(len(shown)))
    more = f" (first {MAX_BARS} of {len(values)})" if len(values) > MAX_BARS else ""
    return (
        "```mermaid\nxychart-beta\n"
        f'  title "KL per sample{more}"\n'
        f'  x-axis "sample" [{samples}]\n'
        f'  y-axis "KL (x 1e{exponent})"\n'
        f"  bar [{bars}]\n```\n"
    )
