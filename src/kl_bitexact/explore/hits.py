"""Judge each request's `cached_tokens` against what the geometry allows (pure).

A server can only reuse what it was sent before: a request's cached prefix is at most the
longest prefix its prompt shares with a sequence served since the last flush (earlier
steps, and the other requests of its own batch, which a server may schedule first), never
the whole prompt (one token is always computed), and, with pages, a whole number of pages.
A count outside that is a finding even when every token matches its replay: sglang PR
24910's CI log, `expected cached_tokens=4864, got 4863`, called a flake.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kl_bitexact.explore.geometry import Geometry
from kl_bitexact.explore.workload import Batch, Flush, Tokens, Workload
from kl_bitexact.run.checks.metrics import reusable_prefix, shared_prefix

if TYPE_CHECKING:
    from kl_bitexact.explore.execute import Served


@dataclass(frozen=True)
class Miscount:
    """A request whose reported cached_tokens the geometry does not allow."""

    served: Served
    allowed: int  # the most it may reuse: the page-aligned shared prefix, below its length
    shared: int  # tokens its prompt shares with what was served before it

    @property
    def observed(self) -> int:
        return self.served.generation.cached_tokens or 0

    def expected(self, geometry: Geometry) -> str:
        if geometry.page_size > 1:
            return f"a multiple of the page size {geometry.page_size}, at most {self.allowed}"
        return f"at most {self.allowed}"

    def as_dict(self, geometry: Geometry) -> dict[str, Any]:
        return {
            "kind": "cached_tokens",
            "step": self.served.step,
            "slot": self.served.slot,
            "prompt_tokens": len(self.served.prompt),
            "cached_tokens": self.observed,
            "expected_cached_tokens": self.allowed,
            "expected": self.expected(geometry),
            "shared_prefix_tokens": self.shared,
            "batch_cached_tokens": list(self.served.batch_cached),
            "located": self.locate(geometry),
        }

    def locate(self, geometry: Geometry) -> str:
        prompt = len(self.served.prompt)
        return (
            f"cached_tokens {self.observed} reported for a {prompt}-token prompt sharing "
            f"{self.shared} tokens with earlier requests: expected {self.expected(geometry)} "
            f"({self.allowed} is {geometry.on_boundaries(self.allowed)}), got {self.observed}"
        )


def unreported(batch: Sequence[Served]) -> int:
    """How many of `batch` reported no cached_tokens: hits `miscounts` cannot judge, counted
    so that "nothing found" does not stand for them."""
    return sum(1 for item in batch if item.generation.cached_tokens is None)


def miscounts(
    geometry: Geometry, batch: Sequence[Served], before: Sequence[Sequence[int]]
) -> list[Miscount]:
    """Each request of `batch` whose cached_tokens the geometry does not allow; `before`:
    every sequence (prompt and answer) served since the last flush, before this batch."""
    found = []
    for item in batch:
        cached = item.generation.cached_tokens
        if cached is None:
            continue  # not reported: nothing to judge (the checks say "cannot tell")
        others = [s.prompt + s.generation.output_ids for s in batch if s is not item]
        shared = shared_prefix(item.prompt, [*before, *others])
        allowed = most_reusable(geometry, len(item.prompt), shared)
        if cached > allowed or cached % geometry.page_size:
            found.append(Miscount(item, allowed, shared))
    return found


def most_reusable(geometry: Geometry, prompt: int, shared: int) -> int:
    """The largest cached prefix the geometry allows: whole pages of the shared prefix,
    leaving at least one prompt token to compute."""
    return reusable_prefix(prompt, shared, geometry.page_size)


def reaches_cache(geometry: Geometry, workload: Workload) -> bool:
    """Whether some answered request of `workload` could be served a cached prefix: a prompt
    sharing at least a page (less the token always computed) with a sequence an earlier
    step left since the last flush. Static, no server: answers are stood in for by tokens no
    prompt shares. A workload where this is False is one the noise-floor rule can only
    report as not having reached the cache path."""
    tokens = Tokens(geometry.vocab_size, seed=0)
    sequences: list[tuple[int, ...]] = []  # every prompt's, in order (continuations name them)
    cached: list[tuple[int, ...]] = []  # what was left since the last flush
    for step in workload.steps:
        if isinstance(step, Flush):
            cached = []
        if not isinstance(step, Batch):
            continue
        prompts = _built(tokens, step, sequences)
        if step.answered and any(_reusable(geometry, p, cached) for p in prompts):
            return True
        answers = [_stand_in(p, step) for p in prompts]
        sequences += answers
        cached += answers
    return False


def _built(tokens: Tokens, step: Batch, earlier: Sequence[Sequence[int]]) -> list[tuple[int, ...]]:
    """`step`'s prompts as tokens, after the prompts `earlier` (their whole sequences)."""
    start = len(earlier)
    return [tuple(tokens.prompt(p, start + i, earlier)) for i, p in enumerate(step.prompts)]


def _reusable(geometry: Geometry, prompt: Sequence[int], cached: Sequence[Sequence[int]]) -> bool:
    return most_reusable(geometry, len(prompt), shared_prefix(prompt, cached)) > 0


def _stand_in(prompt: tuple[int, ...], step: Batch) -> tuple[int, ...]:
    """`prompt`'s sequence with an answer no prompt shares (0 is never a prompt token)."""
    return prompt + (0,) * step.max_new_tokens if step.answered else prompt
