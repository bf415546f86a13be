"""A shard plan in the form sglang's test/run_suite.py consumes unchanged (pure).

sglang's stage workflow starts one job per partition id and runs
`run_suite.py --suite S --auto-partition-id I --auto-partition-size N
--partition-model-file model.json`; run_suite.py reads `model.json`'s `est[S]` (repository-
relative path -> seconds; an in-process group as `group:<key>`) and its `auto_partition`
assigns units greedily, longest first (ties by file name, groups after files), to the least
loaded partition. It cannot be handed a plan, only seconds: so the plan here is exactly the
assignment that code makes from the seconds we write, and those seconds are ours (measured
durations, else est_time; a group's own entry, computed as sglang deducts a shared import).

The caller writes the partitions entry (`{"arr": [...], "size": N, "max_parallel": N}`, the
shape the stage workflow indexes) and the model file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kl_bitexact.registry.model import Registration

# sglang's _BUNDLE_IMPORT_COST_SEC: each member of an in-process group after the first
# saves one cold `import sglang` (~10 s); a group never costs less than 1 s.
BUNDLE_IMPORT_COST_SEC = 10.0
BUNDLE_MIN_SEC = 1.0
GROUP_PREFIX = "group:"


@dataclass(frozen=True)
class Unit:
    key: str  # the model file's key: a repository-relative path, or group:<key>
    files: tuple[str, ...]
    seconds: float

    @property
    def sort_name(self) -> str:
        # sglang compares absolute paths (which start with "/") with "group:<key>".
        return self.key if self.key.startswith(GROUP_PREFIX) else "/" + self.key


def units(registrations: Sequence[Registration], measured: Mapping[str, float]) -> list[Unit]:
    """Files, and in-process groups with sglang's deduction applied to our seconds."""
    seconds = {r.file: measured.get(r.file, r.est_time) for r in registrations}
    singles: list[Unit] = []
    single_files: set[str] = set()  # a file registered twice is one unit
    groups: dict[str, list[str]] = {}
    for r in registrations:
        if r.in_process_group:
            members = groups.setdefault(r.in_process_group, [])
            members += [] if r.file in members else [r.file]
        elif r.file not in single_files:
            single_files.add(r.file)
            singles.append(Unit(r.file, (r.file,), seconds[r.file]))
    for key, files in groups.items():
        total = sum(seconds[file] for file in files)
        deducted = total - max(0, len(files) - 1) * BUNDLE_IMPORT_COST_SEC
        singles.append(
            Unit(GROUP_PREFIX + key, tuple(sorted(files)), max(deducted, BUNDLE_MIN_SEC))
        )
    return singles


def partition(items: Sequence[Unit], size: int) -> list[list[Unit]]:
    """sglang's auto_partition: longest first, ties by name, onto the least loaded (first)."""
    shards: list[list[Unit]] = [[] for _ in range(size)]
    loads = [0.0] * size
    for unit in sorted(items, key=lambda u: (-u.seconds, u.sort_name)):
        index = min(range(size), key=loads.__getitem__)
        shards[index].append(unit)
        loads[index] += unit.seconds
    return shards


def makespan(shards: Sequence[Sequence[Unit]]) -> float:
    return max((sum(unit.seconds for unit in shard) for shard in shards), default=0.0)


def needed(items: Sequence[Unit], budget_seconds: float) -> int | None:
    """The fewest partitions whose sglang plan fits `budget_seconds`; None if none can."""
    if not items or max(unit.seconds for unit in items) > budget_seconds:
        return None
    for size in range(1, len(items) + 1):
        if makespan(partition(items, size)) <= budget_seconds:
            return size
    return len(items)


def partitions_entry(shards: Sequence[Sequence[Unit]]) -> dict[str, object]:
    """What the stage workflow reads from `partitions[<suite>]`, plus the planned files."""
    size = len(shards)
    return {
        "arr": list(range(size)),
        "size": size,
        "max_parallel": size,
        "files": [[file for unit in shard for file in unit.files] for shard in shards],
    }


def model_est(items: Sequence[Unit]) -> dict[str, float]:
    """`est[<suite>]` of the partition model file."""
    return {unit.key: unit.seconds for unit in sorted(items, key=lambda u: u.key)}
