"""Number formats shared by the terminal, the checks' messages and every rendering (pure)."""

from __future__ import annotations

MISSING = "-"  # a value the test did not produce


def plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def fmt_kl(value: float | None) -> str:
    """Exact zero as `0` (bit-exact is the point), anything else in 3 significant digits."""
    if value is None:
        return MISSING
    return "0" if value == 0 else f"{value:.2e}"
