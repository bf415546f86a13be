"""Failures already found, kept across runs in Hypothesis's example database.

Hypothesis saves each failing example it shrank under a key and replays what it holds
under that key before it generates anything new (its `reuse` phase), dropping an entry that
no longer fails. The key names the geometry, because the strategy draws lengths from it:
a workload saved against one geometry means something else against another. Tokens are
drawn from the run's seed, so a saved workload is replayed with this run's tokens (every
fault found so far is a matter of shape, not of token values).

A run that reports more than one finding replays the database again after each: an entry
that still fails, with a bug this run already reported, is no longer "interesting" to that
round, and Hypothesis would drop it. `Keeping` refuses to drop such an entry, so every
finding stays saved; an entry that no longer fails at all is still dropped.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase

from kl_bitexact.explore.geometry import Geometry

# Changed whenever the workload strategy changes shape, so old entries are not misread.
STRATEGY_VERSION = 3  # 2: Pressure steps; 3: batches hung up on or sent apart


class Keeping(ExampleDatabase):
    """`inner`, except that the entries in `still_failing` are never deleted or moved."""

    def __init__(self, inner: ExampleDatabase) -> None:
        super().__init__()
        self.inner = inner
        self.still_failing: set[bytes] = set()

    def save(self, key: bytes, value: bytes) -> None:
        self.inner.save(key, value)

    def fetch(self, key: bytes) -> Iterable[bytes]:
        return self.inner.fetch(key)

    def delete(self, key: bytes, value: bytes) -> None:
        if value not in self.still_failing:
            self.inner.delete(key, value)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        if value not in self.still_failing:
            self.inner.move(src, dest, value)


@dataclass(frozen=True)
class Examples:
    database: Keeping
    key: bytes
    path: Path

    def saved(self) -> int:
        """How many failing workloads are saved for this geometry (replayed first)."""
        return sum(1 for _ in self.database.fetch(self.key))

    def keep(self, choices: bytes) -> None:
        """The entry `choices` still fails (with a bug already reported): never drop it."""
        self.database.still_failing.add(choices)


def open_examples(path: Path, geometry: Geometry) -> Examples:
    """The example database in directory `path`, keyed for `geometry` (created if new)."""
    path.mkdir(parents=True, exist_ok=True)
    named = json.dumps(
        {"strategy": STRATEGY_VERSION, "geometry": geometry.as_dict()}, sort_keys=True
    )
    key = b"kl-bitexact-explore-" + hashlib.sha256(named.encode()).hexdigest().encode()
    return Examples(Keeping(DirectoryBasedExampleDatabase(str(path))), key, path)
