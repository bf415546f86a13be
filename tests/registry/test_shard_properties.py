"""Shard planning invariants, as properties over random suites (hypothesis)."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from kl_bitexact.registry import shard
from kl_bitexact.registry.model import Registration

seconds = st.floats(min_value=1, max_value=4000, allow_nan=False, allow_infinity=False)


@st.composite
def suites(draw, max_files=30):
    count = draw(st.integers(min_value=1, max_value=max_files))
    groups = draw(
        st.lists(st.sampled_from([None, "g1", "g2", "g3"]), min_size=count, max_size=count)
    )
    return [
        Registration(
            f"test/registered/t{index:02d}.py",
            5,
            "cuda",
            "s",
            draw(seconds),
            in_process_group=group,
        )
        for index, group in enumerate(groups)
    ]


def lpt_makespan(units, count):
    order = sorted(units, key=lambda unit: (-unit.seconds, unit.name))
    weights = [unit.seconds for unit in order]
    loads = [0.0] * count
    for weight, index in zip(weights, shard.lpt(weights, count), strict=True):
        loads[index] += weight
    return max(loads)


@settings(max_examples=150, deadline=None)
@given(suites(), st.integers(min_value=1, max_value=12))
def test_every_file_once_groups_together_never_worse_than_lpt(registrations, count):
    units = shard.units(registrations, {})
    plan = shard.partition(units, min(count, len(units)))
    placed = [file for units_ in plan.shards for unit in units_ for file in unit.files]
    assert sorted(placed) == sorted(r.file for r in registrations)
    for group in {r.in_process_group for r in registrations} - {None}:
        members = {r.file for r in registrations if r.in_process_group == group}
        holding = [
            i for i, units_ in enumerate(plan.shards) for u in units_ if set(u.files) & members
        ]
        assert len(set(holding)) == 1
    assert len(plan.shards) == min(count, len(units))
    assert all(plan.shards)
    weights = [unit.seconds for unit in units]
    assert plan.makespan >= shard.lower_bound(weights, len(plan.shards)) - 1e-6
    assert plan.makespan <= lpt_makespan(units, len(plan.shards)) + 1e-6
    assert abs(sum(plan.loads) - sum(weights)) < 1e-6


@settings(max_examples=100, deadline=None)
@given(st.lists(seconds, min_size=1, max_size=7), st.integers(min_value=2, max_value=3))
def test_small_inputs_are_partitioned_optimally(weights, count):
    units = [shard.Unit(f"f{i}", (f"f{i}",), w) for i, w in enumerate(weights)]
    plan = shard.partition(units, count)
    optimum = min(
        max(
            sum(w for w, s in zip(weights, assignment, strict=True) if s == k) for k in range(count)
        )
        for assignment in itertools.product(range(count), repeat=len(weights))
    )
    assert plan.makespan <= optimum + 1e-6


@settings(max_examples=50, deadline=None)
@given(suites(max_files=15), st.integers(min_value=1, max_value=5))
def test_plans_are_deterministic(registrations, count):
    units = shard.units(registrations, {})
    assert shard.partition(units, count) == shard.partition(list(reversed(units)), count)


@settings(max_examples=60, deadline=None)
@given(suites(max_files=12), st.floats(min_value=60, max_value=20000))
def test_shards_needed_is_the_fewest_that_fit(registrations, budget):
    units = shard.units(registrations, {})
    needed = shard.shards_needed(units, budget)
    if max(unit.seconds for unit in units) > budget:
        assert needed is None
        return
    assert needed is not None
    assert shard.partition(units, needed).makespan <= budget + 1e-6
    total = sum(unit.seconds for unit in units)
    assert needed >= total / budget - 1e-9


def test_a_suite_of_thousands_of_files_is_planned():
    units = [
        shard.Unit(f"f{i:04d}", (f"f{i:04d}",), float(10 + (i * 7919) % 900)) for i in range(1500)
    ]
    plan = shard.partition(units, 16)
    weights = [unit.seconds for unit in units]
    assert plan.makespan <= shard.lower_bound(weights, 16) * 1.01
