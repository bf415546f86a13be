"""Benchmark: `kl-bitexact report head.json --baseline base.json`, the whole process.

    python benchmarks/report.py [--sizes 1000,10000,20000] [--samples S] [--repeat R]
                                [--red-every N]

Generates a head and a base results.json per size (one in N of head's tests red with first
divergences, some blocked; N=100 by default, `--red-every 1` for a run where everything
fails: the longest comment to trim), then times the CLI as a user runs it: interpreter
start, imports, reading and validating both files, compare, render. Target: under 1 s at
20,000 tests. Prints median and best wall and median CPU (user + system) seconds per size.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from processes import KL, compile_bytecode, header, machine, timed
from render import make_run

from kl_bitexact.results import io as results_io

TARGET_S = 1.0
TARGET_TESTS = 20_000


def write_pair(
    directory: Path, tests: int, samples: int, red_every: int = 100
) -> tuple[Path, Path]:
    head, base = directory / f"head-{tests}.json", directory / f"base-{tests}.json"
    results_io.write_atomic(make_run(tests, samples, red_every=red_every), head)
    results_io.write_atomic(make_run(tests, samples, red_every=2 * red_every), base)
    return head, base


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,20000")
    parser.add_argument("--samples", type=int, default=8, help="samples per test (default 8)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--red-every", type=int, default=100, help="one head test in N red (default 100)"
    )
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    compile_bytecode()
    print(machine())
    print(
        f"kl-bitexact report HEAD --baseline BASE, {args.samples} samples/test, "
        f"1 in {args.red_every} red, median of {args.repeat} (seconds)\n"
    )
    print(f"{'tests':>7} {'MB each':>8} {header()}  exit")
    verdict = 0
    with tempfile.TemporaryDirectory(prefix="kl-bench-report-") as scratch:
        for tests in sizes:
            head, base = write_pair(Path(scratch), tests, args.samples, args.red_every)
            argv = [*KL, "report", str(head), "--baseline", str(base)]
            timing = timed(argv, args.repeat)
            megabytes = head.stat().st_size / 1e6
            print(f"{tests:>7,} {megabytes:>8.1f} {timing.cells()}  {timing.exit_code}")
            if tests >= TARGET_TESTS and timing.wall >= TARGET_S:
                verdict = 1
    print(
        f"\ntarget: under {TARGET_S} s wall at {TARGET_TESTS:,} tests: "
        f"{'met' if verdict == 0 else 'NOT met'}"
    )
    return verdict


if __name__ == "__main__":
    raise SystemExit(main())
