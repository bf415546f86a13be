"""Hypothesis strategies for workloads aimed at a geometry (pure).

A cache bug shows only where a request is served a prefix another one left, so every
workload can reuse one: each batch's first prompt is on the common prefix (at least a page
of root 0 and a token of its own, or the next turn of the first such prompt), and a workload
starts with two batches in a row (perhaps pressure between them, never a flush; the second
answered, never hung up on). After them
come up to MAX_STEPS - 2 batches, each perhaps after a flush or pressure. Every first
alternative is the simplest (`one_of` shrinks toward it), lengths come from
`Geometry.lengths`, shortest first, and counts start small, so Hypothesis's shrinker still
moves a failure toward fewer steps, fewer requests, shorter prompts and fewer new tokens;
the greedy pass after it (workload.smaller) leaves out a step or prompt not needed, down to
a single batch.
"""

from __future__ import annotations

from hypothesis import strategies as st

from kl_bitexact.explore import pressure
from kl_bitexact.explore.geometry import Geometry
from kl_bitexact.explore.workload import (
    ABANDONED,
    ROOTS,
    TOGETHER,
    Batch,
    Flush,
    Pressure,
    Prompt,
    Step,
    Workload,
)

MAX_STEPS = 6
MAX_BATCH = 4
MAX_NEW_TOKENS = 8
# A step as drawn: a flush or pressure comes with the batch after it.
Drawn = Step | tuple[Step, Batch]


def prompts(geometry: Geometry, longest: int) -> st.SearchStrategy[Prompt]:
    """A batch's prompt after its first: anywhere (first: what the shrinker moves toward),
    or on the common prefix."""
    return st.one_of(anywhere(geometry, longest), on_prefix(geometry, longest))


def anywhere(geometry: Geometry, longest: int) -> st.SearchStrategy[Prompt]:
    """Any root, any shared length (or none), perhaps continuing an earlier prompt."""
    lengths = st.sampled_from(geometry.lengths(longest))
    return st.builds(
        Prompt,
        root=st.integers(0, ROOTS - 1),
        shared=st.one_of(st.just(0), lengths),
        own=st.integers(0, 3) | lengths,
        salt=st.integers(0, 3),
        continues=st.none() | st.integers(0, MAX_STEPS * MAX_BATCH),
    )


def on_prefix(geometry: Geometry, longest: int) -> st.SearchStrategy[Prompt]:
    """At least a page of root 0, then at least one token of its own: every two such
    prompts share a page, and the later one has a token left to compute past it. Or, in a
    later step, the next turn of the workload's first prompt (itself on the prefix): its
    whole sequence, which also holds the state a hybrid model keeps only at the last
    position it tracked (a shorter shared prefix may find no state to start from there)."""
    lengths = geometry.lengths(longest)
    paged = [length for length in lengths if length >= geometry.page_size] or [longest]
    return st.builds(
        Prompt,
        root=st.just(0),
        shared=st.sampled_from(paged),
        own=st.integers(1, 3) | st.sampled_from(lengths),
        salt=st.integers(0, 3),
        continues=st.none() | st.just(0),
    )


def batches(
    geometry: Geometry, longest: int, sends: tuple[str, ...] = (TOGETHER,)
) -> st.SearchStrategy[Batch]:
    """1 to MAX_BATCH prompts, the first on the common prefix (so any two batches in a row
    can share a page)."""
    rest = st.lists(prompts(geometry, longest), max_size=MAX_BATCH - 1)
    return st.builds(
        Batch,
        prompts=st.tuples(on_prefix(geometry, longest), rest).map(_joined),
        max_new_tokens=st.integers(1, MAX_NEW_TOKENS),
        sent=st.sampled_from(sends),
    )


def unflushed(
    geometry: Geometry, longest: int, sends: tuple[str, ...] = (TOGETHER,)
) -> st.SearchStrategy[Drawn]:
    """A workload's second step: a batch, or pressure with the batch after it, never a flush
    nor hung up on, so its first prompt is answered after the first batch's, sharing a page
    with it."""
    answered = tuple(send for send in sends if send != ABANDONED) or (TOGETHER,)
    batch = batches(geometry, longest, answered)
    return batch if pressure.unfillable(geometry) else st.one_of(batch, _pressed(batch))


def steps(
    geometry: Geometry, longest: int, sends: tuple[str, ...] = (TOGETHER,)
) -> st.SearchStrategy[Drawn]:
    """A batch sent as `sends` allows (together first: what the shrinker moves toward), or
    a flush or pressure, each with the batch that follows it (a flush with nothing after
    it, or before anything, reaches no cache)."""
    batch = batches(geometry, longest, sends)
    flushed = st.tuples(st.just(Flush()), batch)
    if pressure.unfillable(geometry):
        return st.one_of(batch, flushed)
    return st.one_of(batch, flushed, _pressed(batch))


def _pressed(batch: st.SearchStrategy[Batch]) -> st.SearchStrategy[tuple[Step, Batch]]:
    """Pressure with the batch after it: what can reuse (and so restore) what it evicted."""
    return st.tuples(st.builds(Pressure, st.integers(*pressure.QUARTERS)), batch)


def workloads(
    geometry: Geometry, longest: int, sends: tuple[str, ...] = (TOGETHER,)
) -> st.SearchStrategy[Workload]:
    """Workloads of two batches in a row (the second perhaps after pressure), then up to
    MAX_STEPS - 2 batches (each perhaps after a flush or pressure), whose prompts sit on
    and beside the boundaries; `sends`: how the adapter can send a batch
    (workload.SENDS). The second batch's first prompt can always reuse a page the first
    batch left (hits.reaches_cache)."""
    first = batches(geometry, longest, sends)
    later = st.lists(steps(geometry, longest, sends), max_size=MAX_STEPS - 2)
    return st.tuples(first, unflushed(geometry, longest, sends), later).map(_flattened)


def _flattened(drawn: tuple[Batch, Drawn, list[Drawn]]) -> Workload:
    """The steps in order, a flush or pressure and its batch as two steps."""
    first, second, later = drawn
    return Workload((first, *(step for item in (second, *later) for step in _as_steps(item))))


def _joined(drawn: tuple[Prompt, list[Prompt]]) -> tuple[Prompt, ...]:
    return (drawn[0], *drawn[1])


def _as_steps(item: Drawn) -> tuple[Step, ...]:
    return item if isinstance(item, tuple) else (item,)
