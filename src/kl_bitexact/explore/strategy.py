"""Hypothesis strategies for workloads aimed at a geometry (pure).

Lengths come from `Geometry.lengths`, shortest first, and counts start small, so
Hypothesis's shrinker moves a failure toward fewer steps, fewer requests, shorter
prompts and fewer new tokens.
"""

from __future__ import annotations

from hypothesis import strategies as st

from kl_bitexact.explore.geometry import Geometry
from kl_bitexact.explore.workload import ROOTS, Batch, Flush, Prompt, Step, Workload

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


def steps(geometry: Geometry, longest: int) -> st.SearchStrategy[Step]:
    batch = st.builds(
        Batch,
        prompts=st.lists(prompts(geometry, longest), min_size=1, max_size=MAX_BATCH).map(tuple),
        max_new_tokens=st.integers(1, MAX_NEW_TOKENS),
    )
    return st.one_of(batch, st.just(Flush()))


def workloads(geometry: Geometry, longest: int) -> st.SearchStrategy[Workload]:
    """Workloads of up to MAX_STEPS steps whose prompts sit on and beside the boundaries."""
    listed = st.lists(steps(geometry, longest), min_size=1, max_size=MAX_STEPS)
    return listed.map(lambda items: Workload(tuple(items)))
