"""The cache geometry a server reports, and the prompt lengths that sit on its boundaries."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Ids are drawn below this when the server does not report its vocabulary.
DEFAULT_VOCAB = 256
# Boundaries are hit at 1..MULTIPLES times their size, and one token either side.
MULTIPLES = 3


class GeometryError(ValueError):
    """The server's answer does not say what exploring needs (the message says which key)."""


@dataclass(frozen=True)
class Geometry:
    page_size: int
    track_interval: int | None
    chunk_size: int | None
    window: int | None
    vocab_size: int
    deterministic: bool
    # The device pool in tokens (sglang's max_total_tokens) and whether evicted pages go to
    # a host tier (enable_hierarchical_cache): what pressure is sized from and what it hits.
    pool_tokens: int | None = None
    host_tier: bool = False

    def boundaries(self) -> dict[str, int]:
        """Each named boundary size the server reported."""
        named = {
            "page": self.page_size,
            "track interval": self.track_interval,
            "prefill chunk": self.chunk_size,
            "window": self.window,
        }
        return {name: size for name, size in named.items() if size}

    def lengths(self, longest: int) -> tuple[int, ...]:
        """Prompt lengths on and beside every boundary, shortest first (the shrinker moves
        toward the front), with a few below the first page."""
        found = {1, 2, 3}
        for size in self.boundaries().values():
            for multiple in range(1, MULTIPLES + 1):
                found |= {multiple * size - 1, multiple * size, multiple * size + 1}
        return tuple(sorted(length for length in found if 1 <= length <= longest))

    def describe(self, length: int) -> str:
        """`length` against the page size, e.g. "exactly 1 page" or "2 pages + 3"."""
        pages, rest = divmod(length, self.page_size)
        unit = "page" if pages == 1 else "pages"
        if rest == 0:
            return f"exactly {pages} {unit}" if pages else "0 tokens"
        return f"{pages} {unit} + {rest}" if pages else f"{rest} tokens (under a page)"

    def on_boundaries(self, length: int) -> str:
        """`length` against every boundary it sits on exactly, e.g. "exactly 4 pages,
        exactly 1 prefill chunk"; against the page size when it sits on none."""
        exact = [
            f"exactly {length // size} {name}{'' if length == size else 's'}"
            for name, size in self.boundaries().items()
            if length and length % size == 0
        ]
        return ", ".join(exact) or self.describe(length)

    def as_dict(self) -> dict[str, Any]:
        return {
            "page_size": self.page_size,
            "mamba_track_interval": self.track_interval,
            "chunked_prefill_size": self.chunk_size,
            "sliding_window_size": self.window,
            "vocab_size": self.vocab_size,
            "enable_deterministic_inference": self.deterministic,
            "max_total_tokens": self.pool_tokens,
            "enable_hierarchical_cache": self.host_tier,
        }


def read_geometry(info: Mapping[str, Any], source: str) -> Geometry:
    """The geometry in a server's /server_info answer; GeometryError when the page size is
    missing (nothing can be aimed without it)."""
    page = _size(info, "page_size", source)
    if page is None:
        raise GeometryError(f"{source} does not report page_size: no boundary to aim at")
    return Geometry(
        page_size=page,
        track_interval=_size(info, "mamba_track_interval", source),
        chunk_size=_size(info, "chunked_prefill_size", source),
        window=_size(info, "sliding_window_size", source),
        vocab_size=_size(info, "vocab_size", source) or DEFAULT_VOCAB,
        deterministic=info.get("enable_deterministic_inference") is True,
        pool_tokens=_pool(info, source),
        host_tier=info.get("enable_hierarchical_cache") is True,
    )


def _pool(info: Mapping[str, Any], source: str) -> int | None:
    """The device pool: `max_total_tokens` as the server resolved it, else sglang's
    scheduler's `max_total_num_tokens` (top level or its first `internal_states` entry)."""
    states = info.get("internal_states")
    scheduler = states[0] if isinstance(states, list) and states else {}
    for where in (info, scheduler if isinstance(scheduler, Mapping) else {}):
        for key in ("max_total_tokens", "max_total_num_tokens"):
            size = _size(where, key, source)
            if size is not None:
                return size
    return None


def _size(info: Mapping[str, Any], key: str, source: str) -> int | None:
    value = info.get(key)
    if value is None or value == -1:  # sglang's -1: not set
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise GeometryError(f"{source} reports {key}={value!r}: expected a positive integer")
    return value
