"""explore's workloads aim at the cache path: every one can reuse a prefix another request
left (hits.reaches_cache, static: no server), for any geometry, while the shrinker still
reaches a single short prompt."""

from __future__ import annotations

from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

from kl_bitexact.explore.geometry import Geometry
from kl_bitexact.explore.hits import reaches_cache
from kl_bitexact.explore.strategy import workloads
from kl_bitexact.explore.workload import (
    ABANDONED,
    APART,
    SENDS,
    TOGETHER,
    Batch,
    Flush,
    Prompt,
    Workload,
    smaller,
)

SIZES = st.none() | st.sampled_from([1, 2, 16, 32, 64, 256])


@st.composite
def geometries(draw: st.DrawFn) -> Geometry:
    page = draw(st.sampled_from([1, 16, 64]))
    pool = draw(st.none() | st.sampled_from([512, 16_384]))
    track, chunk, window = draw(SIZES), draw(SIZES), draw(SIZES)
    return Geometry(page, track, chunk, window, 256, draw(st.booleans()), pool_tokens=pool)


def _longest(geometry: Geometry) -> int:
    """As the search sizes its prompts (search.Search.longest)."""
    return max(geometry.boundaries().values()) * 3 + 1


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.data(), geometries(), st.sampled_from([(TOGETHER,), (TOGETHER, APART), SENDS]))
def test_every_workload_can_reuse_a_prefix(
    data: st.DataObject, geometry: Geometry, sends: tuple[str, ...]
) -> None:
    """The share is 100% (benchmarks/explore_reuse.py: 29-39% before the strategy aimed at
    it, 19-31% with batches hung up on): the second batch is answered, and its first prompt
    shares at least a page with the first batch's first prompt (or continues it), whatever
    comes between or after, whatever is hung up on."""
    workload = data.draw(workloads(geometry, _longest(geometry), sends))
    assert reaches_cache(geometry, workload), workload.as_list()


def test_reaching_the_cache_needs_a_page_shared_with_an_earlier_step() -> None:
    """The static judge itself: each way a workload misses the cache path, and each way it
    reaches it."""
    geometry = Geometry(16, None, None, None, 256, True)
    page, short, other = Prompt(0, 16, 1), Prompt(0, 15, 1), Prompt(1, 16, 1)
    misses = [
        Workload((Batch((page, page), 1),)),  # one step: nothing earlier
        Workload((Batch((page,), 1), Flush(), Batch((page,), 1))),  # a flush between
        Workload((Batch((short,), 1), Batch((short,), 1))),  # under a page shared
        Workload((Batch((page,), 1), Batch((other,), 1))),  # another root
        Workload((Batch((page,), 1), Batch((Prompt(0, 16, 0),), 1))),  # no token past it
        Workload((Batch((page,), 1), Batch((page,), 1, sent=ABANDONED))),  # never answered
    ]
    reaches = [
        Workload((Batch((page,), 1), Batch((Prompt(0, 32, 1),), 1))),
        Workload((Batch((Prompt(1, 3, 12),), 2), Batch((Prompt(0, 0, 1, continues=0),), 1))),
        Workload((Batch((page,), 1, sent=ABANDONED), Batch((page,), 1))),
    ]
    assert [reaches_cache(geometry, workload) for workload in misses] == [False] * len(misses)
    assert all(reaches_cache(geometry, workload) for workload in reaches)


def test_a_failure_still_shrinks_to_two_short_requests_and_leaves_out_to_one() -> None:
    """Hypothesis's shrinker moves toward two one-prompt batches of a page and a token, one
    new token each; the greedy pass after it leaves one of them out."""
    geometry = Geometry(16, 16, 64, None, 256, True)
    quick = settings(database=None, max_examples=200, deadline=None)
    found = find(workloads(geometry, _longest(geometry)), lambda _: True, settings=quick)
    assert found == Workload((Batch((Prompt(0, 16, 1),), 1), Batch((Prompt(0, 16, 1),), 1)))
    assert Workload((Batch((Prompt(0, 16, 1),), 1),)) in list(smaller(found))
