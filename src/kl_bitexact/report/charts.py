"""Small mermaid charts for the report (GitHub renders mermaid code blocks).

Only numbers and fixed words go into a chart: mermaid has its own syntax, and no
untrusted string is needed to draw a bar per sample.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

MAX_BARS = 64  # beyond this a bar chart is unreadable in a comment
FAR_ABOVE = 100.0
_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def per_sample_kl(values: Sequence[float], threshold: float | None = None) -> str | None:
    """A bar chart of KL per sample, the threshold drawn as a line, or None when a chart
    would say nothing.

    The y-axis starts at 0 (a sample of KL 0 has no bar, not a stub) and reaches the
    highest bar or the threshold. Values are scaled by a power of ten so mermaid never
    sees scientific notation; the axis says the unit ("KL (10⁻⁵)").
    """
    shown = list(values[:MAX_BARS])
    if len(shown) < 2 or not all(math.isfinite(v) for v in shown) or max(shown) <= 0:
        return None
    # A threshold far above every bar would flatten them all to nothing: not drawn then.
    drawn = threshold is not None and 0 < threshold <= FAR_ABOVE * max(shown)
    top = max([*shown, threshold]) if drawn and threshold is not None else max(shown)
    exponent = math.floor(math.log10(top))

    def scaled(value: float) -> float:
        # Below float's normal range 10**exponent underflows to 0 (5e-324 gives 1e-324):
        # divide by the power in two steps that each stay representable.
        half = exponent // 2
        return max(value, 0.0) / 10.0**half / 10.0 ** (exponent - half)

    bars = ", ".join(f"{scaled(value):.3f}" for value in shown)
    samples = ", ".join(str(index) for index in range(len(shown)))
    more = f" (first {MAX_BARS} of {len(values)})" if len(values) > MAX_BARS else ""
    unit = "" if exponent == 0 else f" (10{str(exponent).translate(_SUPERSCRIPT)})"
    ceiling = math.ceil(scaled(top) * 1.1 * 100) / 100
    lines = [
        "```mermaid",
        "xychart-beta",
        f'  title "KL per sample{more}{_threshold(threshold) if drawn else ""}"',
        f'  x-axis "sample" [{samples}]',
        f'  y-axis "KL{unit}" 0 --> {ceiling:g}',
        f"  bar [{bars}]",
    ]
    if drawn and threshold is not None:
        line = ", ".join(f"{scaled(threshold):.3f}" for _ in shown)
        lines.append(f"  line [{line}]")
    return "\n".join(lines) + "\n```\n"


def _threshold(threshold: float | None) -> str:
    return f", threshold {threshold:.3g} (line)"
