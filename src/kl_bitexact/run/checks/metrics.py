"""The numbers of a bit-exact check, as pure functions of plain values.

- k3 KL exactly as sglang computes it (kl_test_utils.compare_kl_divergence):
  `r = replay - decode`, `kl_i = mean(exp(r) - 1 - r)`, `avg = mean_i(kl_i)`.
- exact-match counts: logprob pairs compared and how many differ in any bit.
- where each differing sample first diverges, related to the cache geometry.
- how many samples the server's geometry lets hit the cache at all (PR 34405's lesson).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Re-exported: the checks use them as metrics.*; their home is results.aggregate (numpy-free).
from kl_bitexact.results.aggregate import KL_INFINITE as KL_INFINITE
from kl_bitexact.results.aggregate import average as average
from kl_bitexact.results.aggregate import enough_hits as enough_hits
from kl_bitexact.results.model import Divergence


@dataclass(frozen=True)
class Sample:
    """One prompt's decoded logprobs beside the replay's logprobs of the same tokens; None
    where the server did not report a position (llama.cpp mid-character tokens)."""

    index: int
    # Tokens before the first decoded one (the prompt of the turn being scored).
    prompt_len: int
    cached_tokens: int | None
    decode: tuple[float | None, ...]
    replay: tuple[float | None, ...]
    # The decoded token ids (compared between repeats of a test: `run --repeat`).
    output_ids: tuple[int, ...] = ()

    def compared(self) -> tuple[tuple[int, float, float], ...]:
        """(token index, decode, replay) where both sides reported the position."""
        return self._compared

    @functools.cached_property
    def _compared(self) -> tuple[tuple[int, float, float], ...]:
        # Worked out once: judging a sample reads it three times (KL and exact counts, the
        # positions not reported, the first divergence), a pass over every token each.
        return tuple(
            (index, a, b)
            for index, (a, b) in enumerate(zip(self.decode, self.replay, strict=True))
            if a is not None and b is not None
        )

    @property
    def not_reported(self) -> int:
        """Positions left out of KL and exact counts because a side did not report them."""
        return len(self.decode) - len(self.compared())


@dataclass(frozen=True)
class Geometry:
    """The server settings that decide where the cache can resume (sglang's names)."""

    page_size: int = 1
    # Recurrent-state checkpoint spacing (--mamba-track-interval); None: no such state.
    track_interval: int | None = None
    # Speculative tokens per verify block (--speculative-num-draft-tokens); 1: none.
    speculative_block: int = 1
    radix_cache: bool = True
    # Where a hybrid model's prefill leaves checkpoints (sglang's mamba prefill rule:
    # chunk boundaries); None: prefill can resume at any resume_step.
    prefill_chunk: int | None = None
    # The device cache budget in tokens (sglang's max_total_tokens); None: not reported.
    token_budget: int | None = None
    # A hierarchical cache's host tier, as a multiple of the device budget (sglang's
    # --hicache-ratio): evicted pages wait there and come back on a hit. None: no host
    # tier; 0.0: a host tier of a size in bytes (--hicache-size), in tokens unknown.
    host_ratio: float | None = None
    # Sequences the server's cache keeps at once (llama.cpp: one per slot, `total_slots`);
    # None: no such limit reported (sglang's radix tree shares one budget).
    slots: int | None = None

    @classmethod
    def from_server_info(cls, info: Mapping[str, Any]) -> Geometry:
        speculative = info.get("speculative_algorithm")
        block = _positive(info.get("speculative_num_draft_tokens")) if speculative else None
        interval = _positive(info.get("mamba_track_interval"))
        return cls(
            page_size=_positive(info.get("page_size")) or 1,
            track_interval=interval,
            speculative_block=block or 1,
            radix_cache=not info.get("disable_radix_cache", False),
            prefill_chunk=_positive(info.get("chunked_prefill_size")) if interval else None,
            token_budget=_positive(info.get("max_total_tokens")),
            host_ratio=_host_ratio(info),
            slots=_positive(info.get("total_slots")),
        )

    @property
    def cache_capacity(self) -> int | None:
        """Tokens the server can hold at once for reuse: the device budget, plus a host
        tier's (ratio x the device's) when there is one: the cached pages wait there while
        the running requests take the device. None: not known."""
        if self.token_budget is None or self.host_ratio == 0.0:
            return None
        return int(self.token_budget * (1.0 + (self.host_ratio or 0.0)))

    @property
    def resume_step(self) -> int:
        """Positions where a cached prefix can end: a page boundary that is also a
        checkpoint (a decode checkpoint survives only on a page boundary)."""
        if self.track_interval is None:
            return self.page_size
        return math.lcm(self.page_size, self.track_interval)

    @property
    def prefill_step(self) -> int:
        """Positions where a prefix cached by a prefill (no decoding) can end."""
        if self.prefill_chunk is None:
            return self.resume_step
        return math.lcm(self.page_size, self.prefill_chunk)


def _host_ratio(info: Mapping[str, Any]) -> float | None:
    if not info.get("enable_hierarchical_cache"):
        return None
    if _positive(info.get("hicache_size")):  # gigabytes: how many tokens that is, unknown
        return 0.0
    ratio = info.get("hicache_ratio")
    if isinstance(ratio, (int, float)) and not isinstance(ratio, bool) and ratio >= 1:
        return float(ratio)
    return 0.0


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


# --- KL and exact match ---------------------------------------------------------------


def k3(decode: Sequence[float], replay: Sequence[float]) -> float:
    """sglang's per-sample KL estimate; identical values (even both -inf) count 0."""
    if len(decode) == len(replay) and all(a == b for a, b in zip(decode, replay, strict=True)):
        # Every term is exp(0) - 1 - 0 = 0, so numpy's mean would be 0.0 too: a bit-exact
        # sample (what a passing run is made of) costs no numpy import (0.2 s of CPU).
        return 0.0
    import numpy as np

    a, b = np.asarray(decode, dtype=np.float64), np.asarray(replay, dtype=np.float64)
    same = a == b
    if not np.all(np.isfinite(a[~same])) or not np.all(np.isfinite(b[~same])):
        return KL_INFINITE
    with np.errstate(over="ignore", invalid="ignore"):
        r = np.where(same, 0.0, b - a)
        # exp(r) - 1, not expm1: the same rounding as sglang, so values match its logs.
        value = float(np.mean((np.exp(r) - 1) - r)) if r.size else 0.0
    return value if math.isfinite(value) else KL_INFINITE


def mismatched(decode: Sequence[float], replay: Sequence[float]) -> int:
    return sum(1 for a, b in zip(decode, replay, strict=True) if a != b)


# --- where it diverges ------------------------------------------------------------------


def first_divergence(sample: Sample, geometry: Geometry) -> Divergence | None:
    for index, a, b in sample.compared():
        if a != b:
            position = sample.prompt_len + index
            return Divergence(
                sample=sample.index,
                token_index=index,
                cached_tokens=sample.cached_tokens,
                decode_logprob=_finite_or_none(a),
                replay_logprob=_finite_or_none(b),
                hint=boundary_hint(position, sample.cached_tokens, geometry, first=index == 0),
            )
    return None


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def boundary_hint(
    position: int, cached_tokens: int | None, geometry: Geometry, *, first: bool = False
) -> str:
    """Relate a sequence position to the restored prefix, pages and checkpoints."""
    # Only decoded tokens are compared: at the first one the damage may lie earlier.
    seen = " (the first decoded token: the cause may be earlier)" if first else ""
    parts = [f"diverges at position {position}{seen}"]
    if cached_tokens:
        offset = position - cached_tokens
        if offset == 0:
            parts.append(f"= first token after the restored prefix ({cached_tokens} cached)")
        else:
            parts.append(
                f"{offset:+d} from the end of the restored prefix ({cached_tokens} cached)"
            )
    elif cached_tokens == 0:
        parts.append("with no cached prefix")
    parts.append(_nearest("page", position, geometry.page_size))
    if geometry.track_interval:
        parts.append(_nearest("checkpoint", position, geometry.track_interval))
    return "; ".join(part for part in parts if part)


def _nearest(kind: str, position: int, step: int) -> str:
    if step <= 1:
        return ""
    below = position // step * step
    if position == below:
        return f"on a {kind} boundary ({kind} size {step})"
    return f"{position - below} after the {kind} boundary at {below} ({kind} size {step})"


# --- how many samples can hit -----------------------------------------------------------


def prefill_hit_possible(prompt_len: int, geometry: Geometry) -> bool:
    """After a warm-up with the same prompt, can any prefix be reused? A hit must
    leave at least one token to compute, and ends on a resume position."""
    return geometry.radix_cache and (prompt_len - 1) // geometry.prefill_step >= 1


def decode_hit_possible(prompt_len: int, output_len: int, geometry: Geometry) -> bool:
    """sglang counts a decode hit when turn 2 reuses more than `prompt + 1` tokens,
    so a resume position must fall inside turn 1's decoded tokens."""
    if not geometry.radix_cache:
        return False
    step = geometry.resume_step
    # The last decoded token was sampled, never fed back: its state does not exist.
    last_state = prompt_len + output_len - 1
    return last_state // step * step > prompt_len + 1


def overshoot_may_miss(prompt_len: int, output_len: int, geometry: Geometry) -> bool:
    """Speculative decoding commits whole verify blocks: up to `speculative_block` tokens
    past the returned ones are consumed, and when the latest checkpoint lands there it
    cannot serve the next turn (PR 35293's natural misses)."""
    if geometry.speculative_block <= 1:
        return False
    step = geometry.resume_step
    last_state = prompt_len + output_len - 1
    return (last_state + geometry.speculative_block) // step > last_state // step


def geometry_warning(expected: int, total: int, min_ratio: float, geometry: Geometry) -> str:
    """Say so when the configuration, not the engine, limits the hits."""
    if total == 0 or expected >= total:
        return ""
    share = f"only {expected}/{total} (~{round(100 * expected / total)}%) samples can hit"
    interval, page = geometry.track_interval, geometry.page_size
    if interval and interval % page:
        fix = f"set --mamba-track-interval {page} (a multiple of --page-size {page})"
    elif interval and interval > page:
        fix = f"set --mamba-track-interval {page} to checkpoint on every page"
    else:
        fix = "use longer prompts or more max_new_tokens relative to the page size"
    weak = (
        " (below min_cache_hit_ratio: this check cannot pass)"
        if expected <= min_ratio * total
        else ""
    )
    return f"server geometry: {share}{weak}; {fix}"


def held_tokens(kept: Sequence[int], working: Sequence[int], page_size: int) -> int:
    """Tokens the cache must hold at once for every sample to be reused: what each sample
    leaves behind (whole pages) plus what the reusing requests allocate while they run."""
    pages = sum(-(-length // page_size) for length in kept)
    return pages * page_size + sum(working)


def eviction_warning(held: int, geometry: Geometry) -> str:
    """Say so when the server's cache budget can evict samples before they are reused
    (sglang evicts least-recently-used leaves): the misses would be the budget's, not a bug's."""
    capacity = geometry.cache_capacity
    if capacity is None or held <= capacity:
        return ""
    budget = f"the server's max_total_tokens is {geometry.token_budget}"
    if geometry.host_ratio:  # the bundled hicache suite warned, its host tier left out
        budget += f" (with its host tier at {geometry.host_ratio:g}x: {capacity} in all)"
    return (
        f"cache budget: reusing every sample needs about {held} tokens in the cache at once, "
        f"{budget}, so least-recently-used samples can be evicted before they are reused and "
        f"hit fewer than predicted; raise --max-total-tokens above {held} (sglang: or "
        "--mem-fraction-static), or send fewer or shorter samples"
    )


def slot_bound(expected: int, samples: int, geometry: Geometry) -> int | None:
    """The hit prediction once slots are counted: unchanged while every sample has a slot
    of its own; unknown (None) beyond, where only a host-side cache the server does not
    report (llama.cpp's --cache-ram) can keep the rest."""
    if geometry.slots is None or samples <= geometry.slots:
        return expected
    return None


def slot_warning(samples: int, geometry: Geometry) -> str:
    """Say so when the samples outnumber the sequences the server's slots keep at once."""
    slots = geometry.slots
    if slots is None or samples <= slots:
        return ""
    return (
        f"slots: {samples} samples but the server keeps {slots} sequences in its slots, so a "
        f"sample's cached prompt is evicted before it is reused unless a host-side prompt "
        f"cache restores it (llama.cpp: --cache-ram, on by default; with --cache-ram 0 "
        f"expect no hits at all, each request evicting one needed later); start the server "
        f"with -np {samples} or more, or send at most {slots} samples"
    )


def shared_prefix(prompt: Sequence[int], before: Sequence[Sequence[int]]) -> int:
    """The longest prefix `prompt` shares with any sequence of `before` (0 with none)."""
    return max((_common_prefix(prompt, seen) for seen in before), default=0)


def reusable_prefix(prompt_len: int, shared: int, page_size: int) -> int:
    """The largest cached prefix the geometry allows a prompt sharing `shared` tokens with
    what was served: whole pages of it, leaving at least one prompt token to compute (the
    rule explore's hit judge and `concurrent_prefix_hit` both hold `cached_tokens` to)."""
    return max(min(shared, prompt_len - 1), 0) // page_size * page_size


def _common_prefix(left: Sequence[int], right: Sequence[int]) -> int:
    count = 0
    for a, b in zip(left, right, strict=False):
        if a != b:
            break
        count += 1
    return count
