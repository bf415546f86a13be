"""Pressure: prompts that fill the server's device pool on purpose (pure).

A `Pressure` step sends fresh prompts (tokens no other prompt shares) totalling a
multiple of the pool the server reports, with no new tokens, so that the least recently
used pages - everything cached before it - are evicted, to the host tier where there is
one, and a later request that reuses them restores them. Both the pool it fills and the
prompts it sends are bounded: a larger pool is not filled (explore says so).
"""

from __future__ import annotations

from kl_bitexact.explore.geometry import Geometry

# The largest pool explore fills: every Pressure step costs up to twice this in prefill.
MAX_POOL_TOKENS = 16384
# Each pressure prompt is at most this long.
PROMPT_TOKENS = 1024
# Pressure sizes in quarters of the pool: 1x to 2x.
QUARTERS = (4, 8)


def unfillable(geometry: Geometry) -> str | None:
    """Why explore sends no pressure to this server (None: it does)."""
    pool = geometry.pool_tokens
    if pool is None:
        return (
            "the server does not report its device pool (max_total_tokens): no pressure "
            "is sent, so eviction and the host tier are met only by chance"
        )
    if pool > MAX_POOL_TOKENS:
        return (
            f"the device pool ({pool} tokens) is over {MAX_POOL_TOKENS}: no pressure is "
            f"sent; start the server with --max-total-tokens {MAX_POOL_TOKENS} or less to "
            "explore eviction and the host tier"
        )
    return None


def prompt_lengths(geometry: Geometry, quarters: int) -> list[int]:
    """The lengths of the prompts of one Pressure step: `quarters` / 4 x the pool."""
    assert geometry.pool_tokens is not None, "only a reported pool is filled"
    total = -(-geometry.pool_tokens * quarters // 4)
    lengths = [PROMPT_TOKENS] * (total // PROMPT_TOKENS)
    return lengths + ([total % PROMPT_TOKENS] if total % PROMPT_TOKENS else [])
