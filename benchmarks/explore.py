"""Benchmark: `kl-bitexact explore` against the reference engine, whole processes.

    python benchmarks/explore.py [--seeds 5] [--budget 120]

Time to first finding under `--fault one-page-prefix-mixed-batch` for each seed (the median
is issue 39's figure), the requests it shrank the finding to, and the sequences per second
explore pushes through a healthy server beside a plain `run` (a `match` suite: every
sequence generated once and replayed once, as explore's are) on the same server.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from processes import KL, machine

GEOMETRY = ("--enable-deterministic-inference", "--page-size", "16", "--mamba-track-interval", "16")
FAULT = ("--fault", "one-page-prefix-mixed-batch")
LISTENING = "kl-bitexact reference server listening on "
MATCH_SAMPLES = 64
MATCH_SUITE = f"""\
name: bench-match
server: {{engine: reference}}
tests:
  - {{name: match, check: match, samples: {MATCH_SAMPLES}, prompt_tokens: [1, 49],
     max_new_tokens: 4, temperature: 0.0, vocab_size: 256}}
"""


@contextmanager
def server(*args: str) -> Iterator[str]:
    """A `serve-reference` process on a free port; its URL."""
    command = [*KL, "serve-reference", "--port", "0", *args]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith(LISTENING):
                yield line[len(LISTENING) :].strip()
                return
        raise SystemExit(f"serve-reference did not start: {' '.join(command)}")
    finally:
        process.terminate()
        process.wait(timeout=30)


def explore(url: str, seed: int, budget: float, out: Path) -> dict[str, object]:
    argv = [*KL, "explore", "--base-url", url, "--seed", str(seed), "--budget", str(budget)]
    subprocess.run([*argv, "--out", str(out)], stderr=subprocess.DEVNULL, check=False)
    data: dict[str, object] = json.loads((out / "results.json").read_text())
    return data


def first_findings(url: str, seeds: Sequence[int], budget: float, work: Path) -> None:
    print(f"{'seed':>4} {'first found s':>14} {'shrunk to':>10} {'workloads':>10}")
    found: list[float] = []
    for seed in seeds:
        data = explore(url, seed, budget, work / f"seed-{seed}")
        first = data["first_found_s"]
        findings = data["findings"]
        assert isinstance(findings, list)
        shrunk = findings[0]["requests"] if findings else "-"
        if isinstance(first, float):
            found.append(first)
        shown = f"{first:.1f}" if isinstance(first, float) else "not found"
        print(f"{seed:>4} {shown:>14} {shrunk!s:>10} {data['workloads']!s:>10}")
    if found:
        print(
            f"median time to first finding: {statistics.median(found):.1f} s "
            f"({len(found)}/{len(seeds)} seeds found it within {budget:.0f} s)"
        )


def throughput(url: str, work: Path, budget: float) -> None:
    data = explore(url, 0, budget, work / "healthy")
    elapsed = data["elapsed_s"]
    requests = data["requests"]
    findings = data["findings"]
    assert isinstance(elapsed, float) and isinstance(requests, int)
    assert isinstance(findings, list)
    suite = work / "match.yaml"
    suite.write_text(MATCH_SUITE)
    started = time.perf_counter()
    argv = [*KL, "run", str(suite), "--base-url", url, "--out", str(work / "run"), "--quiet"]
    subprocess.run(argv, check=False)
    wall = time.perf_counter() - started
    print(
        f"explore (healthy, {budget:.0f} s): {requests / elapsed:.1f} sequences/s "
        f"({requests} in {elapsed:.1f} s; findings: {len(findings)})"
    )
    print(
        f"run, match of {MATCH_SAMPLES} samples: {MATCH_SAMPLES / wall:.1f} sequences/s "
        f"(whole process, {wall:.1f} s)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--budget", type=float, default=120.0)
    parser.add_argument("--throughput-budget", type=float, default=20.0)
    args = parser.parse_args(argv)
    print(machine())
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        with server(*GEOMETRY, *FAULT) as url:
            first_findings(url, range(1, args.seeds + 1), args.budget, work)
        with server(*GEOMETRY) as url:
            throughput(url, work, args.throughput_budget)
    return 0


if __name__ == "__main__":
    sys.exit(main())
