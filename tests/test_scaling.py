"""Cost grows with the input, never faster (issue 40): `report` at ten times the tests, or
`--history-dir` at ten times the runs, must cost at most ~15x the CPU. Linear code meets that
on any machine; a quadratic step (the gate asking the baseline something that walks the whole
base run, once per test: 25 s at 10,000 tests) cannot. Ratios of CPU time measured in this
process, best of a few runs interleaved, not seconds: absolute figures are benchmarks/'."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
import scaling_runs

from kl_bitexact import cli

SMALL, LARGE = 1_000, 10_000
HISTORY_RUNS = 3
LIMIT = 15.0
REPEATS = 3


@pytest.fixture(scope="module")
def sizes(tmp_path_factory: pytest.TempPathFactory) -> dict[int, scaling_runs.Files]:
    root = tmp_path_factory.mktemp("scaling")
    return {n: scaling_runs.files(root / str(n), n, HISTORY_RUNS) for n in (SMALL, LARGE)}


def _cpu(work: Callable[[], int]) -> float:
    started = time.process_time()
    work()
    return time.process_time() - started


def _ratio(small: Callable[[], int], large: Callable[[], int]) -> tuple[float, float]:
    """Best-of CPU seconds of each, runs interleaved (a busy spell hits both alike)."""
    small_s, large_s = [], []
    for _ in range(REPEATS):
        small_s.append(_cpu(small))
        large_s.append(_cpu(large))
        if large_s[-1] > 3 * LIMIT * small_s[-1]:
            break  # far past the limit: no noise explains it, and more runs take minutes
    return min(small_s), min(large_s)


def _report(files: scaling_runs.Files, extra: tuple[str, ...], out: Path) -> Callable[[], int]:
    argv = ["report", str(files.head), "--out", str(out), "--fail-on", "never", *extra]

    def work() -> int:
        code = cli.main(argv)
        assert code == 0, f"report exited {code}"
        return code

    return work


def _extra(files: scaling_runs.Files, what: str) -> tuple[str, ...]:
    baseline = ("--baseline", str(files.base)) if "baseline" in what else ()
    history = ("--history-dir", str(files.history)) if "history" in what else ()
    return (*baseline, *history)


@pytest.mark.parametrize("what", ["head only", "baseline", "history", "baseline and history"])
def test_report_cost_grows_linearly_with_the_tests(
    what: str, sizes: dict[int, scaling_runs.Files], tmp_path: Path
) -> None:
    small, large = sizes[SMALL], sizes[LARGE]
    small_s, large_s = _ratio(
        _report(small, _extra(small, what), tmp_path / "small.md"),
        _report(large, _extra(large, what), tmp_path / "large.md"),
    )
    ratio = large_s / small_s
    assert ratio <= LIMIT, (
        f"report with {what}: {LARGE:,} tests cost {large_s:.3f} s CPU, {ratio:.1f}x the "
        f"{small_s:.3f} s of {SMALL:,} tests (at most {LIMIT:g}x: a step grows faster than "
        "the input)"
    )
