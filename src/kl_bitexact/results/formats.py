"""Number formats shared by the terminal, the checks' messages and every rendering (pure)."""

from __future__ import annotations

from kl_bitexact.results.aggregate import KL_ROUNDING

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
