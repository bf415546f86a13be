"""Benchmark: `kl-bitexact report head.json --baseline base.json`, the whole process.

    python benchmarks/report.py [--sizes 1000,10000,20000] [--samples S] [--repeat R]
                                [--red-every N]

Generates a head and a base results.json per size (one in N of head's tests red with first
divergences, some blocked; N=100 by default, `--red-every 1` for a run where everything
fails: the longest comment to trim), then times the CLI as a user runs it: interpreter
start, imports, reading and validating both files, compare, render. Target: under 1 s at
20,000 tests. Prints median and best wall and median CPU (user + system) seconds per size.

Then the same report without the baseline and with it, interleaved (`--pairs` runs each),
each run's own CPU and peak memory: issue 40's targets at 100,000 tests are at most 3 s of
CPU with the baseline and at most 1.3x the report without it (`--sizes 1000,10000,100000`).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from processes import KL, compile_bytecode, header, machine, paired, timed
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
    parser.add_argument("--pairs", type=int, default=5, help="interleaved runs of each (5)")
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
            side_by_side(head, base, tests, args.pairs)
    print(
        f"\ntarget: under {TARGET_S} s wall at {TARGET_TESTS:,} tests: "
        f"{'met' if verdict == 0 else 'NOT met'}"
    )
    return verdict


def side_by_side(head: Path, base: Path, tests: int, pairs: int) -> None:
    """report without and with --baseline, interleaved: median CPU, peak memory, ratio."""
    plain = [*KL, "report", str(head), "--fail-on", "never", "--out", str(head) + ".md"]
    runs = paired({"without": plain, "with": [*plain, "--baseline", str(base)]}, pairs)
    cpu = {name: statistics.median(m.cpu for m in found) for name, found in runs.items()}
    peak = {name: max(m.peak_mb for m in found) for name, found in runs.items()}
    print(
        f"{'':>7} {'':>8} without baseline {cpu['without']:.3f} s CPU {peak['without']:.0f} MB; "
        f"with {cpu['with']:.3f} s CPU {peak['with']:.0f} MB; "
        f"ratio {cpu['with'] / cpu['without']:.2f} (median of {pairs}, interleaved)"
    )


if __name__ == "__main__":
    raise SystemExit(main())
