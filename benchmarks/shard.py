"""Shard plans against sglang's plain LPT and the lower bound, on sglang-like suites.

    python benchmarks/shard.py [--seeds 20]

For each distribution and shard count, over several seeds: the mean makespan of sglang's own
partitioner (`auto_partition` of sglang/test/ci/ci_register.py, run from sglang 0.5.23's wheel
via tests/helpers/sglang_wheel.py: plain LPT), of `kl_bitexact.registry.shard.partition`, and of
the lower bound max(longest file, total / N); the ratios to the bound (1.000 is optimal); and
the planner's worst time. Distributions model GPU suites: a few long files among many short.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from kl_bitexact.registry import shard

# sglang's partitioner comes from its wheel (fetched once into the cache, never installed).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "helpers"))
from sglang_wheel import load_sglang_module

Distribution = Callable[[random.Random], list[float]]


def sglang_like(rng: random.Random) -> list[float]:
    """5-8 long end-to-end files (20-50 min) among 40-70 short ones (lognormal, ~2 min)."""
    long = [rng.uniform(1200, 3000) for _ in range(rng.randint(5, 8))]
    short = [min(1200.0, rng.lognormvariate(4.6, 0.9)) for _ in range(rng.randint(40, 70))]
    return long + short


def large_suite(rng: random.Random) -> list[float]:
    """A whole per-commit stage: 300 files, a dozen of them long."""
    return sglang_like(rng)[:12] + [rng.lognormvariate(4.2, 1.0) for _ in range(288)]


def small_gpu_suite(rng: random.Random) -> list[float]:
    """A B200 bit-exact suite: 6-11 files of 5-30 min (where LPT's 4/3 bites)."""
    return [rng.uniform(300, 1800) for _ in range(rng.randint(6, 11))]


def heavy_tail(rng: random.Random) -> list[float]:
    return [rng.paretovariate(1.3) * 60 for _ in range(rng.randint(20, 40))]


def lpt_worst_case(rng: random.Random) -> list[float]:
    """Graham's instance for 4 shards: 7,7,6,6,5,5,4,4,4 (x 100 s); LPT gives 15, optimum 12."""
    return [700.0, 700, 600, 600, 500, 500, 400, 400, 400]


DISTRIBUTIONS: dict[str, tuple[Distribution, tuple[int, ...]]] = {
    "sglang-like": (sglang_like, (2, 4, 8, 12)),
    "large stage": (large_suite, (8, 16)),
    "small GPU suite": (small_gpu_suite, (2, 3, 4)),
    "heavy tail": (heavy_tail, (3, 6)),
    "LPT worst case": (lpt_worst_case, (4,)),
}


def sglang_makespan(weights: list[float], count: int) -> float:
    """The longest shard of sglang's auto_partition, every rank asked as its CI does."""
    ci = load_sglang_module("ci.ci_register")
    files = [
        ci.CIRegistry(backend=ci.HWBackend.CUDA, filename=f"f{i:03d}", est_time=w)
        for i, w in enumerate(weights)
    ]
    shards = [ci.auto_partition(files, rank, count) for rank in range(count)]
    assert sorted(f.filename for part in shards for f in part) == [f.filename for f in files]
    # sglang's module is untyped (loaded from its wheel); its est_time values are floats.
    return float(max(sum(f.est_time for f in part) for part in shards))


def measure(weights: list[float], count: int) -> tuple[float, float, float, float]:
    units = [shard.Unit(f"f{i:03d}", (f"f{i:03d}",), w) for i, w in enumerate(weights)]
    started = time.perf_counter()
    plan = shard.partition(units, count)
    elapsed = time.perf_counter() - started
    bound = shard.lower_bound(weights, count)
    return sglang_makespan(weights, count), plan.makespan, bound, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    seeds = parser.parse_args().seeds
    header = (
        f"{'distribution':<16} {'N':>3} {'sglang s':>8} {'ours s':>8} {'bound s':>8} "
        f"{'sgl/bound':>9} {'ours/bound':>10} {'worst sgl/bound':>15} {'worst ours/bound':>16} "
        f"{'max ms':>7}"
    )
    print(header)
    print("-" * len(header))
    for name, (distribution, counts) in DISTRIBUTIONS.items():
        for count in counts:
            rows = [measure(distribution(random.Random(seed)), count) for seed in range(seeds)]
            lpt, ours, bound, elapsed = (list(column) for column in zip(*rows, strict=True))
            lpt_ratio = [a / b for a, b in zip(lpt, bound, strict=True)]
            our_ratio = [a / b for a, b in zip(ours, bound, strict=True)]
            print(
                f"{name:<16} {count:>3} {statistics.mean(lpt):>8.0f} {statistics.mean(ours):>8.0f} "
                f"{statistics.mean(bound):>8.0f} {statistics.mean(lpt_ratio):>9.3f} "
                f"{statistics.mean(our_ratio):>10.3f} {max(lpt_ratio):>15.3f} "
                f"{max(our_ratio):>16.3f} {max(elapsed) * 1000:>7.0f}"
            )


if __name__ == "__main__":
    main()
