"""Failures already found, kept across runs in Hypothesis's example database.

Hypothesis saves each failing example it shrank under a key and replays what it holds
under that key before it generates anything new (its `reuse` phase), dropping an entry that
no longer fails. The key names the geometry, because the strategy draws lengths from it:
a workload saved against one geometry means something else against another. Tokens are
drawn from the run's seed, so a saved workload is replayed with this run's tokens (every
fault found so far is a matter of shape, not of token values).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase

from kl_bitexact.explore.geometry import Geometry

# Changed whenever the workload strategy changes shape, so old entries are not misread.
STRATEGY_VERSION = 3  # 2: Pressure steps; 3: batches hung up on or sent apart


@dataclass(frozen=True)
class Examples:
    database: ExampleDatabase
    key: bytes
    path: Path

    def saved(self) -> int:
        """How many failing workloads are saved for this geometry (replayed first)."""
        return sum(1 for _ in self.database.fetch(self.key))


def open_examples(path: Path, geometry: Geometry) -> Examples:
    """The example database in directory `path`, keyed for `geometry` (created if new)."""
    path.mkdir(parents=True, exist_ok=True)
    named = json.dumps(
        {"strategy": STRATEGY_VERSION, "geometry": geometry.as_dict()}, sort_keys=True
    )
    key = b"kl-bitexact-explore-" + hashlib.sha256(named.encode()).hexdigest().encode()
    return Examples(DirectoryBasedExampleDatabase(str(path)), key, path)
