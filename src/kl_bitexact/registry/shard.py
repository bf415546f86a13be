"""Partition a suite's files into shards that finish together (pure).

sglang assigns files greedily, longest first, to the least-loaded shard (LPT), which can
end up to 4/3 of the optimum. Here LPT is only the start: a pairwise improvement moves or
swaps files between the longest shard and the others while that shortens the pair, and a
branch and bound, bounded in nodes, searches for a provably better assignment (it is
exact for the small inputs typical of GPU suites). The result is never worse than LPT.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kl_bitexact.registry.model import Registration

# Nodes the branch and bound may visit (~0.2 s); past it, the best plan found so far stands.
SEARCH_BUDGET = 50_000
# The search recurses once per item; past this many items LPT + improvement is already
# within a fraction of a percent of the bound (benchmarks/shard.py), so it is skipped.
SEARCH_MAX_ITEMS = 200
_EPSILON = 1e-9


@dataclass(frozen=True)
class Unit:
    """What lands on one shard as a whole: one file, or an in-process group of files."""

    name: str
    files: tuple[str, ...]
    seconds: float


@dataclass(frozen=True)
class Plan:
    shards: tuple[tuple[Unit, ...], ...]

    @property
    def loads(self) -> tuple[float, ...]:
        return tuple(sum(unit.seconds for unit in shard) for shard in self.shards)

    @property
    def makespan(self) -> float:
        return max(self.loads, default=0.0)


def units(registrations: Sequence[Registration], measured: Mapping[str, float]) -> list[Unit]:
    """One unit per file, files of an in-process group joined; measured seconds win.

    A group costs the sum of its members (sglang subtracts a guessed import saving; the
    sum is the safe side of that guess).
    """
    seconds = {r.file: measured.get(r.file, r.est_time) for r in registrations}
    groups: dict[str, list[str]] = {}
    for r in registrations:
        key = f"group:{r.in_process_group}" if r.in_process_group else r.file
        groups.setdefault(key, [])
        if r.file not in groups[key]:
            groups[key].append(r.file)
    return [
        Unit(name, tuple(sorted(files)), sum(seconds[file] for file in files))
        for name, files in sorted(groups.items())
    ]


def lower_bound(weights: Sequence[float], count: int) -> float:
    """No plan beats the longest unit, nor a perfect split of the total."""
    return max(max(weights, default=0.0), sum(weights) / count)


def partition(items: Sequence[Unit], count: int) -> Plan:
    """The best plan found for `count` shards (LPT, improved, then searched)."""
    order = sorted(items, key=lambda unit: (-unit.seconds, unit.name))
    weights = [unit.seconds for unit in order]
    assignment = improve(weights, lpt(weights, count), count)
    assignment = search(weights, count, assignment)
    return _plan(order, assignment, count)


def lpt(weights: Sequence[float], count: int) -> list[int]:
    """sglang's plain LPT for weights sorted longest first: shard index per item."""
    loads = [0.0] * count
    assignment = []
    for weight in weights:
        shard = min(range(count), key=loads.__getitem__)
        loads[shard] += weight
        assignment.append(shard)
    return assignment


def improve(weights: Sequence[float], assignment: list[int], count: int) -> list[int]:
    """Move or swap items out of the longest shard while that shortens the pair.

    Every step lowers the longest shard of the pair and so the sum of squared loads: it
    terminates, and the makespan never grows.
    """
    assignment = list(assignment)
    for _ in range(10 * len(weights) * count + 1):
        step = _best_step(weights, assignment, count)
        if step is None:
            break
        for item, shard in step:
            assignment[item] = shard
    return assignment


def _best_step(
    weights: Sequence[float], assignment: list[int], count: int
) -> list[tuple[int, int]] | None:
    loads = _loads(weights, assignment, count)
    longest = max(range(count), key=loads.__getitem__)
    best: tuple[float, list[tuple[int, int]]] | None = None
    mine = [i for i, shard in enumerate(assignment) if shard == longest]
    for other in range(count):
        gap = loads[longest] - loads[other]
        if other == longest or gap <= _EPSILON:
            continue
        theirs = [j for j, shard in enumerate(assignment) if shard == other]
        for i in mine:
            for j, delta in [(None, weights[i])] + [(j, weights[i] - weights[j]) for j in theirs]:
                if _EPSILON < delta < gap - _EPSILON:
                    pair_max = max(loads[longest] - delta, loads[other] + delta)
                    if best is None or pair_max < best[0] - _EPSILON:
                        moves = [(i, other)] + ([(j, longest)] if j is not None else [])
                        best = (pair_max, moves)
    return best[1] if best else None


def search(weights: Sequence[float], count: int, start: list[int]) -> list[int]:
    """Branch and bound over items longest first; returns `start` unless it finds better."""
    return _Search(weights, count, start).run()


class _Search:
    """Depth-first assignment of items (longest first) to shards, pruned by the best plan
    so far, by symmetry (equally loaded shards are interchangeable) and by a node budget."""

    def __init__(self, weights: Sequence[float], count: int, start: list[int]) -> None:
        self.weights = weights
        self.loads = [0.0] * count
        self.current = [0] * len(weights)
        self.best = list(start)
        self.best_makespan = max(_loads(weights, start, count))
        self.floor = lower_bound(weights, count)
        self.budget = SEARCH_BUDGET

    def run(self) -> list[int]:
        small = len(self.weights) <= SEARCH_MAX_ITEMS
        if small and self.best_makespan > self.floor + _EPSILON:
            self._visit(0)
        return self.best

    def _visit(self, item: int) -> bool:
        """Explore from `item`; True when the search should stop."""
        self.budget -= 1
        if self.budget < 0:
            return True
        if item == len(self.weights):
            self.best, self.best_makespan = list(self.current), max(self.loads)
            return self.best_makespan <= self.floor + _EPSILON
        weight, tried = self.weights[item], set()
        for shard, load in enumerate(self.loads):
            if load in tried or load + weight >= self.best_makespan - _EPSILON:
                continue
            tried.add(load)
            self.loads[shard] += weight
            self.current[item] = shard
            stop = self._visit(item + 1)
            self.loads[shard] -= weight
            if stop:
                return True
        return False


def _loads(weights: Sequence[float], assignment: Sequence[int], count: int) -> list[float]:
    loads = [0.0] * count
    for weight, shard in zip(weights, assignment, strict=True):
        loads[shard] += weight
    return loads


def _plan(order: Sequence[Unit], assignment: Sequence[int], count: int) -> Plan:
    shards: list[list[Unit]] = [[] for _ in range(count)]
    for unit, shard in zip(order, assignment, strict=True):
        shards[shard].append(unit)
    # Heaviest shard first: it is the one to start first when runners are scarce.
    shards.sort(key=lambda shard: -sum(unit.seconds for unit in shard))
    return Plan(tuple(tuple(shard) for shard in shards))


def shards_needed(items: Sequence[Unit], budget_seconds: float) -> int | None:
    """The fewest shards whose plan fits every shard in `budget_seconds`; None if none can."""
    if not items or max(unit.seconds for unit in items) > budget_seconds:
        return None
    total = sum(unit.seconds for unit in items)
    for count in range(max(1, math.ceil(total / budget_seconds - _EPSILON)), len(items) + 1):
        if partition(items, count).makespan <= budget_seconds + _EPSILON:
            return count
    return len(items)
