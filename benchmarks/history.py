"""Benchmark: what the history of 20 runs of 1,000 tests costs, as whole processes.

    python benchmarks/history.py [--runs 20] [--tests 1000] [--samples 8] [--repeat 5]

1. Cold fetch: the local GitHub (kl_bitexact.testing, spec-checked) holds `--runs` push runs
   of main, each a results artifact of `--tests` tests (a few flaky ones alternate red and
   green); `kl-bitexact history --repo --workflow` fetches them into an empty cache, with its
   progress lines on stderr (printed here). Then the same again, warm: nothing downloaded.
2. `kl-bitexact report HEAD --baseline BASE` without and with `--history-dir CACHE` (the
   cache the fetch filled): the difference is what the history adds to `report`. Target:
   under 1 s at 20 runs of 1,000 tests.
3. A pull request's first publish (`publish --fetch-baseline --fetch-history`) with the
   cache a push to main filled (the action's publish step with `comment: false`, as the
   reusable workflow runs it on a push, then saves the cache) against an empty cache (a
   pull request's first run before pushes saved one): requests to the local GitHub,
   archives downloaded, wall time. Between the two, the push's own run lands on main.

4. (`--dir-only`) `report HEAD --baseline BASE --history-dir DIR` on `--runs` results files of
   `--tests` tests, against the same without it, interleaved: each run's CPU and peak memory
   (issue 40's target: 100 runs of 10,000 tests within 150 MB, one run held at a time).

Prints the machine and its load: wall time on a busy 2-core machine is not wall time on an
idle one; CPU time says how much of the wait is our own work.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from msgspec import structs
from processes import KL, compile_bytecode, header, machine, paired, timed
from render import make_run

from kl_bitexact.results import io as results_io
from kl_bitexact.results import model as r
from kl_bitexact.testing.fake_state import Run

if TYPE_CHECKING:
    from kl_bitexact.testing.fake_github import FakeGitHub

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
        suites.append(structs.replace(suite, tests=changed))
    info = r.RunInfo(commit=f"{index + 1:040x}", ref="refs/heads/main", started_at=_when(index))
    return results_io.dumps(r.Results(run=info, suites=tuple(suites))).encode()


def _number(test: r.TestResult) -> int:
    return int(test.id.rsplit("_", 1)[1])


def _flaky(test: r.TestResult) -> r.TestResult:
    assert test.cache_hits is not None
    hits = structs.replace(test.cache_hits, hit=test.cache_hits.total // 2)
    return structs.replace(test, status=r.Status.FAILED, cache_hits=hits, message="too few")


def _when(index: int) -> str:
    return f"2026-05-{1 + index // 24:02d}T{index % 24:02d}:00:00Z"


def serve(runs: int, tests: int, samples: int) -> tuple[FakeGitHub, str]:
    from kl_bitexact.testing.fake_github import FakeGitHub

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


# --- 3. a pull request's first publish, with the cache a push filled or none ---------------

PR = 7
PUSHED = "f" * 40
PR_HEAD = "e" * 40
WORKFLOW_REF = f"{REPO}/.github/workflows/bitexact.yml@refs/heads/main"


@dataclass(frozen=True)
class Publish:
    """One publish as a process: wall seconds, requests to GitHub, archives downloaded."""

    wall: float
    requests: int
    downloads: int
    exit_code: int

    def cells(self) -> str:
        return f"{self.wall:>8.2f} {self.requests:>9} {self.downloads:>10}  {self.exit_code}"


def counted(server: FakeGitHub, argv: list[str], env: dict[str, str]) -> Publish:
    def archives() -> int:
        return sum(1 for entry in server.world.requests if entry["path"].endswith("/zip"))

    requests, downloads = len(server.world.requests), archives()
    started = time.perf_counter()
    done = subprocess.run(argv, env={**os.environ, **env}, capture_output=True, check=False)
    wall = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"{argv[len(KL)]} failed ({done.returncode}): {done.stderr.decode()}")
    return Publish(
        wall, len(server.world.requests) - requests, archives() - downloads, done.returncode
    )


def github_env(url: str, event: Path) -> dict[str, str]:
    return {
        "GITHUB_TOKEN": TOKEN,
        "GITHUB_API_URL": url,
        "GITHUB_REPOSITORY": REPO,
        "GITHUB_EVENT_PATH": str(event),
        "GITHUB_WORKFLOW_REF": WORKFLOW_REF,
        "KL_BITEXACT_GITHUB_REQUEST_INTERVAL": "0",
        "KL_BITEXACT_GITHUB_WRITE_INTERVAL": "0",
    }


def push_step(server: FakeGitHub, url: str, root: Path, runs: int, head: Path) -> Publish:
    """The reusable workflow's publish step on a push to main: the action, `comment: false`,
    its history cache in RUNNER_TEMP (what actions/cache then saves)."""
    results = root / "push-results" / "results-shard-0" / "results.json"
    results.parent.mkdir(parents=True)
    shutil.copy(head, results)
    event = root / "push.json"
    event.write_text(json.dumps({"ref": "refs/heads/main", "after": PUSHED}))
    env = github_env(url, event)
    del env["GITHUB_TOKEN"]  # the step's token is its `github-token` input
    env |= {
        "GITHUB_REF": "refs/heads/main",
        "RUNNER_TEMP": str(root / "push-runner"),
        "INPUT_COMMAND": "publish",
        "INPUT_RESULTS_DIR": str(results.parent.parent),
        "INPUT_COMMENT": "false",
        "INPUT_BASELINE": "fetch",
        "INPUT_HISTORY_RUNS": str(runs),
        "INPUT_GITHUB_TOKEN": TOKEN,
    }
    return counted(server, [*KL, "action"], env)


def pr_publish(server: FakeGitHub, url: str, root: Path, runs: int, cache: Path) -> Publish:
    """A pull request's publish, as the workflow runs it, on the history cache `cache`."""
    event = root / "pull_request.json"
    event.write_text(json.dumps({"pull_request": {"number": PR}}))
    argv = [*KL, "publish", str(root / "pr-head.json"), "--fetch-baseline", "--fetch-history"]
    argv += ["--history-runs", str(runs), "--history-cache", str(cache), "--fail-on", "never"]
    return counted(server, argv, github_env(url, event))


def first_publish(args: argparse.Namespace, root: Path) -> None:
    root.mkdir()
    server, url = serve(args.runs, args.tests, args.samples)
    try:
        pushed, pr_head = root / "pushed.json", root / "pr-head.json"
        for sha, path in ((PUSHED, pushed), (PR_HEAD, pr_head)):
            run = make_run(args.tests, args.samples, red_every=100)
            results_io.write_atomic(structs.replace(run, run=r.RunInfo(commit=sha)), path)
        push = push_step(server, url, root, args.runs, pushed)
        # The push's run is done: its results artifact is main's newest run now.
        done = Run(id=9000 + args.runs, workflow="bitexact.yml", head_sha=PUSHED)
        files = {"results-shard-0/results.json": pushed.read_bytes()}
        server.world.add_run(REPO, done, files, "kl-bitexact-results")
        server.world.seed({"repos": {REPO: {"pulls": [{"number": PR, "head_sha": PR_HEAD}]}}})
        pr_publish(server, url, root, args.runs, root / "warm-up")  # creates the comment
        warm, cold = [], []
        for attempt in range(args.repeat):  # each on a cache as the workflow restores it
            restored = root / f"restored-{attempt}"
            shutil.copytree(root / "push-runner" / "kl-bitexact-history", restored)
            warm.append(pr_publish(server, url, root, args.runs, restored))
            cold.append(pr_publish(server, url, root, args.runs, root / f"none-{attempt}"))
    finally:
        server.stop()
    print(f"{args.runs} runs of main; a pull request's first publish (history and baseline)")
    print(f"{'':>30} {'wall s':>8} {'requests':>9} {'downloads':>10}  exit")
    print(f"{'push to main, no cache':>30} {push.cells()}")
    print(f"{'PR, cache the push saved':>30} {median(warm).cells()}")
    print(f"{'PR, no cache':>30} {median(cold).cells()}")
    print(
        f"(PR: median of {args.repeat}; downloads: the history's archives, and the PR's "
        "baseline, which is never cached)"
    )


def median(publishes: list[Publish]) -> Publish:
    ordered = sorted(publishes, key=lambda publish: publish.wall)
    return ordered[len(ordered) // 2]


def history_directory(args: argparse.Namespace, root: Path) -> None:
    """Part 4: --history-dir's CPU and peak memory, with the report's own beside it."""
    directory = root / "history"
    directory.mkdir(parents=True)
    even, odd = main_run(0, args.tests, args.samples), main_run(1, args.tests, args.samples)
    for index in range(args.runs):  # main's runs differ only in run fields and flaky tests
        raw = (odd if index % 2 else even).replace(_when(index % 2).encode(), _when(index).encode())
        (directory / f"run-{9000 + index}.json").write_bytes(raw)
    head, base = root / "head.json", root / "base.json"
    results_io.write_atomic(make_run(args.tests, args.samples, red_every=100), head)
    results_io.write_atomic(make_run(args.tests, args.samples, red_every=200), base)
    plain = [*KL, "report", str(head), "--baseline", str(base), "--out", str(root / "c.md")]
    with_dir = [*plain, "--history-dir", str(directory), "--history-runs", str(args.runs)]
    runs = paired({"without history": plain, "with --history-dir": with_dir}, args.repeat)
    size = sum(path.stat().st_size for path in directory.iterdir()) / 1e6
    print(f"report, {args.runs} runs x {args.tests:,} tests in the history ({size:.0f} MB)")
    for name, found in runs.items():
        cpu = sorted(m.cpu for m in found)[len(found) // 2]
        print(f"{name:>22}: {cpu:.2f} s CPU, peak {max(m.peak_mb for m in found):.0f} MB")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir-only", action="store_true", help="part 4 alone")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--tests", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    compile_bytecode()
    print(machine())
    print(f"history of {args.runs} runs x {args.tests:,} tests, {args.samples} samples/test\n")
    if args.dir_only:
        with tempfile.TemporaryDirectory(prefix="kl-bench-history-") as scratch:
            history_directory(args, Path(scratch))
        return 0
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
            asked = len(server.world.requests)
            warm, cpu, lines = fetch(url, root / "cache", args.runs)
            asked = len(server.world.requests) - asked
            print(
                f"warm fetch: {warm:.2f} s wall, {cpu:.2f} s CPU in kl-bitexact, {asked} "
                f"requests, {len(lines)} progress lines (nothing downloaded)\n"
            )
        finally:
            server.stop()
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
            f"\nhistory adds {added:.3f} s wall ({within.cpu - without.cpu:.3f} s CPU) to "
            f"report; target under {TARGET_S} s: {'met' if added < TARGET_S else 'NOT met'}\n"
        )
        first_publish(args, root / "first-publish")
    return 0 if added < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
