"""Results files of any size for the scaling checks (tests/test_scaling.py): a head, its
base and a directory of base-branch runs, shaped as a real sweep is (one test in 100 red with
first divergences, some of those blocked, a few flaky on main) and written as compact JSON
(the indentation `run` writes only costs time here, not what is measured)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import msgspec
from msgspec import structs

from kl_bitexact.results import io as results_io
from kl_bitexact.results import model as r

SAMPLES = 8
BLOCKER = "sgl-project/sglang#29792"
SUITES = 20


def test_result(index: int, *, red: bool, flaky_hits: bool = False) -> r.TestResult:
    per_sample = tuple((1.9e-4 if red and s % 3 == 0 else 0.0) for s in range(SAMPLES))
    divergences = tuple(
        r.Divergence(s, 128, 640, -2.3125, -2.3125002, "after a restored checkpoint")
        for s in range(0, SAMPLES, 3)
        if red
    )
    hits = SAMPLES // 2 if flaky_hits else SAMPLES
    return r.TestResult(
        id=f"test/registered/test_suite_{index // 100}.py::test_case_{index}",
        check="multiturn",
        status=r.Status.FAILED if red or flaky_hits else r.Status.PASSED,
        kl_div=sum(per_sample) / SAMPLES,
        kl_threshold=1e-9,
        kl_per_sample=per_sample,
        exact=r.ExactMatch(SAMPLES * 128, 40 if red else 0),
        cache_hits=r.CacheHits(hits, SAMPLES, 0.9, SAMPLES),
        first_divergence=divergences,
        blocked_by=(BLOCKER,) if red and index // 100 % 2 else (),
        duration_s=3.0,
        message="too few hits" if flaky_hits else ("avg KL over threshold" if red else ""),
    )


def run(tests: int, *, red_every: int, flaky_every: int = 0, index: int = 0) -> r.Results:
    """A finished run of `tests` tests with its plan: one in `red_every` red; on odd runs
    (`index`) one in `flaky_every` misses half its cache hits."""
    by_suite: dict[str, list[r.TestResult]] = {}
    for number in range(tests):
        flaky = bool(flaky_every and index % 2 and number % flaky_every == 1)
        test = test_result(number, red=number % red_every == 0, flaky_hits=flaky)
        by_suite.setdefault(f"suite-{number % SUITES}", []).append(test)
    server = r.ServerInfo("sglang", ("--page-size", "128"))
    suites = tuple(r.SuiteResult(name, server, tuple(ts)) for name, ts in by_suite.items())
    plan = tuple(r.PlannedTest(s.name, t.id, t.check) for s in suites for t in s.tests)
    info = r.RunInfo(
        commit=f"{index + 1:040x}",
        ref="refs/heads/main",
        started_at=f"2026-05-{1 + index // 24:02d}T{index % 24:02d}:00:00Z",
        finished=True,
    )
    return r.Results(run=info, suites=suites, plan=plan)


def write(results: r.Results, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(msgspec.json.encode(results_io.to_json(results)))
    return path


@dataclass(frozen=True)
class Files:
    """One size's inputs: the head, its base, the base branch's runs."""

    head: Path
    base: Path
    history: Path
    cut: Path  # the head of a run killed halfway: half its planned tests have no result


def files(directory: Path, tests: int, runs: int) -> Files:
    head = write(run(tests, red_every=100), directory / "head.json")
    base = write(run(tests, red_every=200), directory / "base.json")
    history = directory / "history"
    for index in range(runs):
        main = run(tests, red_every=10**9, flaky_every=50, index=index)
        write(main, history / f"run-{1000 + index}.json")
    return Files(
        head, base, history, write(cut_short(run(tests, red_every=100)), directory / "cut.json")
    )


def cut_short(results: r.Results) -> r.Results:
    """`results` as a run killed halfway leaves them: every suite's second half missing
    (its plan still names them), not finished."""
    suites = tuple(structs.replace(s, tests=s.tests[: len(s.tests) // 2]) for s in results.suites)
    return structs.replace(results, suites=suites, run=structs.replace(results.run, finished=False))
