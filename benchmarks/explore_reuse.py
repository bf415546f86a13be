"""Benchmark (static, no server): how many of explore's generated workloads can reuse a prefix.

    python benchmarks/explore_reuse.py [--draws 2000]

Draws workloads from `strategy.workloads` for a few real geometries (those the reference
engine's benchmarks and tests serve) and counts those in which some answered request could
be served a cached prefix another request left: a prompt sharing at least one whole page
(less the one token always computed) with a sequence an earlier step served or sent since
the last flush (explore/hits.py's bound). Answers are stood in for by tokens no prompt
shares, so a continuation shares exactly its earlier prompt and answer. A workload that
cannot reuse anything is one the noise-floor rule reports as NO_HIT: it did not reach the
cache path.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from hypothesis import HealthCheck, given, settings

from kl_bitexact.explore import strategy
from kl_bitexact.explore.geometry import Geometry
from kl_bitexact.explore.hits import reaches_cache
from kl_bitexact.explore.workload import ABANDONED, TOGETHER, Workload

GEOMETRIES = {
    "page 16, track 16, chunk 64, window 32 (serve-reference)": Geometry(
        16, 16, 64, 32, 256, False
    ),
    "page 16, track 16, chunk 64": Geometry(16, 16, 64, None, 256, False),
    "page 16, track 16": Geometry(16, 16, None, None, 256, False),
    "page 1": Geometry(1, None, None, None, 256, False),
    "page 64": Geometry(64, None, None, None, 256, False),
}


def share(geometry: Geometry, draws: int, sends: tuple[str, ...]) -> tuple[int, int]:
    """(workloads that can reuse a prefix, workloads drawn)."""
    longest = max(geometry.boundaries().values()) * 3 + 1  # as search.Search.longest
    drawn: list[Workload] = []

    @settings(
        max_examples=draws, database=None, deadline=None, suppress_health_check=list(HealthCheck)
    )
    @given(strategy.workloads(geometry, longest, sends))
    def draw(workload: Workload) -> None:
        drawn.append(workload)

    draw()
    return sum(1 for workload in drawn if reaches_cache(geometry, workload)), len(drawn)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--draws", type=int, default=2000)
    args = parser.parse_args(argv)
    for sends in ((TOGETHER,), (TOGETHER, ABANDONED)):
        print(f"sent: {', '.join(sends)}")
        for name, geometry in GEOMETRIES.items():
            hits, drawn = share(geometry, args.draws, sends)
            print(f"  {name:<56} {hits:>5} of {drawn:>5} can reuse a prefix ({hits / drawn:.0%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
