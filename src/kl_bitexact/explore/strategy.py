"""Hypothesis strategies for workloads aimed at a geometry (pure).

Lengths come from `Geometry.lengths`, shortest first, and counts start small, so
Hypothesis's shrinker moves a failure toward fewer steps, fewer requests, shorter
prompts and fewer new tokens.
"""

from __future__ import annotations

from hypothesis import strategies as st

from kl_bitexact.explore import pressure
from kl_bitexact.explore.geometry import Geometry
from kl_bitexact.explore.workload import (
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


def prompts(geometry: Geometry, longest: int) -> st.SearchStrategy[Prompt]:
    lengths = st.sampled_from(geometry.lengths(longest))
    return st.builds(
        Prompt,
        root=st.integers(0, ROOTS - 1),
        shared=st.one_of(st.just(0), lengths),
        own=st.integers(0, 3) | lengths,
        salt=st.integers(0, 3),
        continues=st.none() | st.integers(0, MAX_STEPS * MAX_BATCH),
    )


def steps(
    geometry: Geometry, longest: int, sends: tuple[str, ...] = (TOGETHER,)
) -> st.SearchStrategy[Step | tuple[Pressure, Batch]]:
    """A batch sent as `sends` allows (together first: what the shrinker moves toward), a
    flush, or pressure with the batch that follows it."""
    batch = st.builds(
        Batch,
        prompts=st.lists(prompts(geometry, longest), min_size=1, max_size=MAX_BATCH).map(tuple),
        max_new_tokens=st.integers(1, MAX_NEW_TOKENS),
        sent=st.sampled_from(sends),
    )
    if pressure.unfillable(geometry):
        return st.one_of(batch, st.just(Flush()))
    # Pressure is drawn with the batch that follows it: a batch after pressure is what
    # can reuse (and so restore) what the pressure evicted.
    pressed = st.tuples(st.builds(Pressure, st.integers(*pressure.QUARTERS)), batch)
    return st.one_of(batch, st.just(Flush()), pressed)


def workloads(
    geometry: Geometry, longest: int, sends: tuple[str, ...] = (TOGETHER,)
) -> st.SearchStrategy[Workload]:
    """Workloads of up to MAX_STEPS batches or flushes (each batch perhaps after pressure)
    whose prompts sit on and beside the boundaries; `sends`: how the adapter can send a
    batch (workload.SENDS)."""
    listed = st.lists(steps(geometry, longest, sends), min_size=1, max_size=MAX_STEPS)
    return listed.map(_flattened)


def _flattened(items: list[Step | tuple[Pressure, Batch]]) -> Workload:
    """The steps in order, a pressure and its batch as two steps."""
    return Workload(tuple(step for item in items for step in _as_steps(item)))


def _as_steps(item: Step | tuple[Pressure, Batch]) -> tuple[Step, ...]:
    return item if isinstance(item, tuple) else (item,)
