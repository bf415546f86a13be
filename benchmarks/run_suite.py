"""How much of a bundled-suite run is the harness itself, and how much the server.

Runs the bundled example suite (or the suite files given) exactly as `kl-bitexact run`
does, with every engine request timed, and prints a table: wall time, server launch time,
time spent waiting on the server's answers, and the harness's own share. The suites run
twice in this process: with checks sharing cold phases (as `run` does) and with every check
asking for everything itself; the difference in server time is what sharing saves.

The harness share that must stay under 5% is measured on a third run, a whole
`kl-bitexact run` process as users start it: its wall time minus the server's launch,
teardown and answering (the union of those spans, timed inside the process: the next
suite's server launches while the current one answers), so interpreter start-up, imports, suite
parsing, results and report writing all count as harness.

    python benchmarks/run_suite.py [SUITE.yaml ...] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from processes import compile_bytecode, run_once

from kl_bitexact.commands.run import load_suites
from kl_bitexact.errors import ServerError
from kl_bitexact.results import io as results_io
from kl_bitexact.results import model as results
from kl_bitexact.results.model import SuiteResult, TestResult
from kl_bitexact.run import engines
from kl_bitexact.run.engines.base import (
    Engine,
    Generation,
    Replay,
    Reported,
    SamplingParams,
    TokenIds,
)
from kl_bitexact.run.runner import Plan, run_suites
from kl_bitexact.suite.model import DialectName, EngineName, Suite

HARNESS_BUDGET = 0.05
T = TypeVar("T")


class TimedEngine:
    """An Engine that adds the time of every request to a shared counter."""

    def __init__(self, inner: Engine, clock: list[float]) -> None:
        self.inner, self.clock = inner, clock

    def _timed(self, call: Callable[[], T]) -> T:
        started = time.perf_counter()
        try:
            return call()
        finally:
            self.clock[0] += time.perf_counter() - started

    def server_info(self) -> Mapping[str, Any]:
        return self._timed(self.inner.server_info)

    def reported(self) -> Reported:
        return self._timed(self.inner.reported)

    def flush(self) -> None:
        self._timed(self.inner.flush)

    def generate(self, prompts: Sequence[TokenIds], params: SamplingParams) -> list[Generation]:
        return self._timed(lambda: self.inner.generate(prompts, params))

    def replay(self, sequences: Sequence[TokenIds], *, last: int | None = None) -> list[Replay]:
        return self._timed(lambda: self.inner.replay(sequences, last=last))


class Quiet:
    def suite_started(self, suite: Suite) -> None: ...

    def test_finished(self, result: TestResult) -> None: ...

    def suite_finished(self, result: SuiteResult) -> None: ...

    def progress(self, line: str) -> None: ...

    def server_failed(self, suite: Suite, error: ServerError) -> None: ...


@dataclass(frozen=True)
class Measured:
    tests: int
    wall: float
    lifecycle: float  # server launch and teardown
    answering: float  # waiting for the server's answers
    harness: float  # everything else a check does, plus writing results


def measure(suites: Sequence[Path], out: Path, *, share: bool) -> Measured:
    """One run of the suites as `kl-bitexact run` does it, every request timed."""
    clock = [0.0]

    def connect(
        engine: EngineName,
        base_url: str,
        *,
        request_timeout: float,
        dialect: DialectName | None = None,
    ) -> Engine:
        return TimedEngine(
            engines.connect(engine, base_url, request_timeout=request_timeout, dialect=dialect),
            clock,
        )

    plan = Plan(tuple(load_suites(suites)), out / "logs", connect=connect, share_phases=share)
    saving = [0.0]

    def save(partial: results.Results) -> None:
        started = time.perf_counter()
        results_io.write_atomic(partial, out / "results.json")
        saving[0] += time.perf_counter() - started

    started = time.perf_counter()
    final = run_suites(plan, Quiet(), save)
    wall = time.perf_counter() - started
    in_tests = sum(test.duration_s for _, test in final.all_tests())
    return Measured(
        tests=sum(1 for _ in final.all_tests()),
        wall=wall,
        lifecycle=wall - in_tests - saving[0],
        answering=clock[0],
        harness=in_tests - clock[0] + saving[0],
    )


# Run in the measured process before the CLI: times every HTTP request and every server
# launch and stop, and writes the totals when the process ends.
_TIMED_CLI = """
import atexit, json, os, sys, threading, time
from kl_bitexact.run import server
from kl_bitexact.run.engines.openai import OpenAIEngine
from kl_bitexact.run.engines.sglang import SglangEngine
spans = {"answering": [], "lifecycle": []}
def timed(function, key):
    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            spans[key].append((started, time.perf_counter()))
    return wrapper
for engine in (SglangEngine, OpenAIEngine):
    for name in ("server_info", "flush", "generate", "replay"):
        setattr(engine, name, timed(getattr(engine, name), "answering"))
server.launch = timed(server.launch, "lifecycle")
server.Server.stop = timed(server.Server.stop, "lifecycle")
def union(intervals):
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        total += max(0.0, end - max(start, reach))
        reach = max(reach, end)
    return total
def write():
    totals = {key: union(value) for key, value in spans.items()}
    totals["server"] = union(spans["answering"] + spans["lifecycle"])
    open(os.environ["KL_BENCH_TOTALS"], "w").write(json.dumps(totals))
atexit.register(write)
from kl_bitexact.cli import main
sys.exit(main(sys.argv[1:]))
"""


@dataclass(frozen=True)
class Process:
    wall: float
    cpu: float
    answering: float
    lifecycle: float
    server: float  # answering or launching/stopping a server (they overlap: the next
    # suite's server launches while the current one answers)

    @property
    def harness(self) -> float:
        return self.wall - self.server


def measure_process(suites: Sequence[Path], out: Path) -> Process:
    """A whole `kl-bitexact run` process: wall and CPU from outside, server time inside."""
    out.mkdir(parents=True, exist_ok=True)
    totals = out / "server-time.json"
    argv = [sys.executable, "-c", _TIMED_CLI, "run", *map(str, suites), "--out", str(out)]
    wall, cpu, _ = run_once(argv, env={"KL_BENCH_TOTALS": str(totals)})
    inside = json.loads(totals.read_text())
    return Process(wall, cpu, inside["answering"], inside["lifecycle"], inside["server"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suites", nargs="*", type=Path)
    parser.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp(prefix="kl-bench-")))
    args = parser.parse_args()
    compile_bytecode()
    shared = measure(args.suites, args.out / "shared", share=True)
    alone = measure(args.suites, args.out / "alone", share=False)
    print(f"{'tests':<30}{shared.tests:>9}")
    print(f"{'':<30}{'shared phases':>17}{'every check alone':>21}")
    rows = (
        ("wall", "wall"),
        ("server launch and teardown", "lifecycle"),
        ("server answering requests", "answering"),
        ("harness", "harness"),
    )
    for label, key in rows:
        a, b = getattr(shared, key), getattr(alone, key)
        print(
            f"{label:<30}{a:>8.2f}s {100 * a / shared.wall:>6.1f}%"
            f"{b:>12.2f}s {100 * b / alone.wall:>6.1f}%"
        )
    saved = alone.answering - shared.answering
    print(
        f"shared phases save {saved:.2f}s of server time "
        f"({100 * saved / alone.answering:.1f}% of {alone.answering:.2f}s)"
    )
    whole = measure_process(args.suites, args.out / "process")
    print(
        f"\nwhole `kl-bitexact run` process: wall {whole.wall:.2f}s, CPU {whole.cpu:.2f}s, "
        f"server launch and teardown {whole.lifecycle:.2f}s, answering {whole.answering:.2f}s"
    )
    share = whole.harness / whole.wall
    verdict = "ok" if share <= HARNESS_BUDGET else "OVER BUDGET"
    print(
        f"harness (start-up, imports, checks' own work, writing): {whole.harness:.2f}s = "
        f"{100 * share:.1f}% of wall; budget {100 * HARNESS_BUDGET:.0f}%: {verdict}"
    )
    return 0 if verdict == "ok" else 1


if __name__ == "__main__":
    raise SystemExit(main())
