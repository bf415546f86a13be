"""Benchmark: what the history of 20 runs of 1,000 tests costs, as whole processes.

    python benchmarks/history.py [--runs 20] [--tests 1000] [--samples 8] [--repeat 5]

1. Cold fetch: the local GitHub (kl_bitexact.testing, spec-checked) holds `--runs` push runs
   of main, each a results artifact of `--tests` tests (a few flaky ones alternate red and
   green); `kl-bitexact history --repo --workflow` fetches them into an empty cache, with its
   progress lines on stderr (printed here). Then the same again, warm: nothing downloaded.
2. `kl-bitexact report HEAD --baseline BASE` without and with `--history-dir CACHE` (the
   cache the fetch filled): the difference is what the history adds to `report`. Target:
   under 1 s at 20 runs of 1,000 tests.

Prints the machine and its load: wall time on a busy 2-core machine is not wall time on an
idle one; CPU time says how much of the wait is our own work.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from processes import KL, compile_bytecode, header, machine, timed
from render import make_run

from kl_bitexact.results import io as results_io
from kl_bitexact.results import model as r

TARGET_S = 1.0
REPO = "bench/engine"
TOKEN = "bench-token"
FLAKY_EVERY = 50  # one test in 50 alternates red and green across main's runs


def main_run(index: int, tests: int, samples: int) -> bytes:
    """Main's run `index`: healthy but for the flaky tests, red on odd runs."""
    run = make_run(tests, samples, red_every=10**9)  # nothing red
    suites = []
    for suite in run.suites:
        changed = tuple(
            _flaky(test) if index % 2 and _number(test) % FLAKY_EVERY == 1 else test
            for test in suite.tests
        )
        suites.append(dataclasses.replace(suite, tests=changed))
    info = r.RunInfo(commit=f"{index + 1:040x}", ref="refs/heads/main", started_at=_when(index))
    return results_io.dumps(r.Results(run=info, suites=tuple(suites))).encode()


def _number(test: r.TestResult) -> int:
    return int(test.id.rsplit("_", 1)[1])


def _flaky(test: r.TestResult) -> r.TestResult:
    assert test.cache_hits is not None
    hits = dataclasses.replace(test.cache_hits, hit=test.cache_hits.total // 2)
    return dataclasses.replace(test, status=r.Status.FAILED, cache_hits=hits, message="too few")


def _when(index: int) -> str:
    return f"2026-05-{1 + index // 24:02d}T{index % 24:02d}:00:00Z"


def serve(runs: int, tests: int, samples: int) -> tuple[object, str]:
    from kl_bitexact.testing.fake_github import FakeGitHub
    from kl_bitexact.testing.fake_state import Run

    server = FakeGitHub(TOKEN).start()
    server.world.seed({"repos": {REPO: {}}})
    for index in range(runs):
        run = Run(
            id=9000 + index,
            workflow="bitexact.yml",
            head_sha=f"{index + 1:040x}",
            created_at=_when(index),
            conclusion="failure" if index % 2 else "success",
        )
        files = {"results-shard-0/results.json": main_run(index, tests, samples)}
        server.world.add_run(REPO, run, files, "kl-bitexact-results")
    return server, server.url


def fetch(url: str, cache: Path, runs: int) -> tuple[float, float, list[str]]:
    """Wall and CPU seconds of `kl-bitexact history` fetching into `cache`, and its stderr."""
    env = {
        **os.environ,
        "GITHUB_TOKEN": TOKEN,
        "GITHUB_API_URL": url,
        "KL_BITEXACT_GITHUB_REQUEST_INTERVAL": "0",
    }
    argv = [*KL, "history", "--repo", REPO, "--workflow", "bitexact.yml", "--json"]
    argv += ["--history-runs", str(runs), "--history-cache", str(cache)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        raise SystemExit(f"history failed ({done.returncode}): {done.stderr}")
    return wall, cpu, done.stderr.splitlines()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--tests", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    compile_bytecode()
    print(machine())
    print(f"history of {args.runs} runs x {args.tests:,} tests, {args.samples} samples/test\n")
    with tempfile.TemporaryDirectory(prefix="kl-bench-history-") as scratch:
        root = Path(scratch)
        server, url = serve(args.runs, args.tests, args.samples)
        try:
            cold, cpu, lines = fetch(url, root / "cache", args.runs)
            print(
                f"cold fetch: {cold:.2f} s wall, {cpu:.2f} s CPU in kl-bitexact (the rest: the "
                "local GitHub, in this process, checking every answer against GitHub's spec)"
            )
            for line in [*lines[:2], "...", *lines[-2:]]:
                print(f"  {line}")
            warm, cpu, lines = fetch(url, root / "cache", args.runs)
            print(
                f"warm fetch: {warm:.2f} s wall, {cpu:.2f} s CPU in kl-bitexact, "
                f"{len(lines)} progress lines (nothing downloaded)\n"
            )
        finally:
            server.stop()  # type: ignore[attr-defined]
        (cache,) = [p.parent for p in (root / "cache").rglob("run-*.json")][:1]
        head, base = root / "head.json", root / "base.json"
        results_io.write_atomic(make_run(args.tests, args.samples, red_every=100), head)
        results_io.write_atomic(make_run(args.tests, args.samples, red_every=200), base)
        plain = [*KL, "report", str(head), "--baseline", str(base), "--out", str(root / "c.md")]
        with_history = [*plain, "--history-dir", str(cache), "--history-runs", str(args.runs)]
        print(f"{'report':>22} {header()}  exit")
        without = timed(plain, args.repeat)
        print(f"{'without history':>22} {without.cells()}  {without.exit_code}")
        within = timed(with_history, args.repeat)
        print(f"{'with --history-dir':>22} {within.cells()}  {within.exit_code}")
    added = within.wall - without.wall
    print(
        f"\nhistory adds {added:.3f} s wall ({within.cpu - without.cpu:.3f} s CPU) to report; "
        f"target under {TARGET_S} s: {'met' if added < TARGET_S else 'NOT met'}"
    )
    return 0 if added < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
