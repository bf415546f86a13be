"""How much of a bundled-suite run is the harness itself, and how much the server.

Runs the bundled example suite (or the suite files given) exactly as `kl-bitexact run`
does, with every engine request timed, and prints a table: wall time, server launch time,
time spent waiting on the server's answers, and the harness's own share (prompts, k3,
scoring, results writing). The harness share must stay under 5% of wall time. The suites
run twice: with checks sharing cold phases (as `run` does) and with every check asking for
everything itself; the difference in server time is what sharing saves.

    python benchmarks/run_suite.py [SUITE.yaml ...] [--out DIR]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from kl_bitexact.commands.run import load_suites
from kl_bitexact.results import io as results_io
from kl_bitexact.results import model as results
from kl_bitexact.results.model import SuiteResult, TestResult
from kl_bitexact.run import engines
from kl_bitexact.run.engines.base import Engine, Generation, Replay, SamplingParams, TokenIds
from kl_bitexact.run.runner import Plan, run_suites
from kl_bitexact.suite.spec import Suite

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
        engine: str, base_url: str, *, request_timeout: float, dialect: str | None = None
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suites", nargs="*", type=Path)
    parser.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp(prefix="kl-bench-")))
    args = parser.parse_args()
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
    verdict = "ok" if shared.harness <= HARNESS_BUDGET * shared.wall else "OVER BUDGET"
    print(f"harness share budget {100 * HARNESS_BUDGET:.0f}% of wall: {verdict}")
    return 0 if verdict == "ok" else 1


if __name__ == "__main__":
    raise SystemExit(main())
