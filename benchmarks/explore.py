"""Benchmark: `kl-bitexact explore` against the reference engine, whole processes.

    python benchmarks/explore.py [--seeds 5] [--budget 120] [--fault NAME ...] [--not-deterministic]

For each fault explore is built to find (FAULTS: the fault and the server flags it needs),
time to first finding for each seed, with no example database (each seed searches afresh;
the median over seeds is issue 39's figure), what the finding was and the requests it shrank
to; then the sequences per second explore pushes through a healthy server beside a plain
`run` (a `match` suite: every sequence generated once and replayed once, as explore's are)
on the same server. `--not-deterministic` starts every server without
--enable-deterministic-inference (plain float32: explore judges by the noise-floor rule) and
prints, per finding, its KL against the floor and whether the handed-back file fails, and
for the healthy server how many workloads the rule judged and how near the nearest came.
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
from typing import Any

from processes import KL, machine

GEOMETRY = ("--enable-deterministic-inference", "--page-size", "16", "--mamba-track-interval", "16")
# A device pool smaller than a workload, a host tier that keeps what it evicts.
TIGHT_POOL = (
    *GEOMETRY,
    "--enable-hierarchical-cache",
    "--max-total-tokens",
    "512",
    "--hicache-ratio",
    "64",
)
# Each fault hidden from the bundled suites, with the server it can act on.
FAULTS = {
    "one-page-prefix-mixed-batch": GEOMETRY,
    "cached-tokens-off-by-one": GEOMETRY,
    "restore-after-eviction": TIGHT_POOL,
    "reuse-after-abandoned-prefill": GEOMETRY,
}
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
    # Time to the first finding: stop there (a healthy server finds none either way).
    argv += ["--out", str(out), "--no-examples-db", "--max-findings", "1"]
    subprocess.run(argv, stderr=subprocess.DEVNULL, check=False)
    data: dict[str, object] = json.loads((out / "results.json").read_text())
    return data


def first_findings(fault: str, url: str, seeds: Sequence[int], budget: float, work: Path) -> str:
    """Each seed's first finding under `fault`; the summary line (median, found of seeds)."""
    print(f"\n{fault}")
    print(f"{'seed':>4} {'first found s':>14} {'shrunk to':>10} {'workloads':>10}  kind, floor")
    found: list[float] = []
    for seed in seeds:
        data = explore(url, seed, budget, work / f"{fault}-{seed}")
        first = data["first_found_s"]
        findings = data["findings"]
        assert isinstance(findings, list)
        shrunk = findings[0]["requests"] if findings else "-"
        kind = _kind(findings[0]) if findings else "-"
        if isinstance(first, float):
            found.append(first)
        shown = f"{first:.1f}" if isinstance(first, float) else "not found"
        print(f"{seed:>4} {shown:>14} {shrunk!s:>10} {data['workloads']!s:>10}  {kind}")
    median = f"{statistics.median(found):.1f} s" if found else "-"
    return f"{fault}: median {median}, {len(found)}/{len(seeds)} seeds found it in {budget:.0f} s"


def _kind(finding: dict[str, Any]) -> str:
    """The finding's kind; under the noise floor its KL, floor and whether the handed-back
    file failed."""
    divergence = finding["divergence"]
    judged = divergence.get("noise_floor")
    if not judged:
        return str(divergence.get("kind", "-"))
    return (
        f"{divergence['kind']}: KL {judged['kl']:.3g}, floor {judged['floor_kl']:.3g}, "
        f"handed back fails: {finding.get('handback_fails')}"
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
    rule = data.get("rule")
    if isinstance(rule, dict) and rule.get("name") == "noise-floor":
        print(
            f"  noise floor: {data['floor_judged']} of {data['workloads']} workloads judged, "
            f"nearest at {data['floor_nearest']} of its bound; not judged: {data['not_judged']}"
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
    parser.add_argument(
        "--fault", action="append", choices=sorted(FAULTS), help="only these (default: all)"
    )
    parser.add_argument(
        "--not-deterministic",
        action="store_true",
        help="servers without --enable-deterministic-inference (the noise-floor rule)",
    )
    args = parser.parse_args(argv)
    flags = _plain if args.not_deterministic else tuple
    print(machine())
    summaries = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for fault in args.fault or FAULTS:
            with server(*flags(FAULTS[fault]), "--fault", fault) as url:
                seeds = range(1, args.seeds + 1)
                summaries.append(first_findings(fault, url, seeds, args.budget, work))
        print("\ntime to first finding (median over seeds):")
        print("\n".join(summaries))
        with server(*flags(GEOMETRY)) as url:
            throughput(url, work, args.throughput_budget)
    print(machine())
    return 0


def _plain(flags: Sequence[str]) -> tuple[str, ...]:
    """The server's flags without deterministic inference: plain float32."""
    return tuple(flag for flag in flags if flag != "--enable-deterministic-inference")


if __name__ == "__main__":
    sys.exit(main())
