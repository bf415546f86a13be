"""Cost grows with the input, never faster (issue 40): `report` at ten times the tests, or
`--history-dir` at ten times the runs, must cost at most ~15x the CPU. Linear code meets that
on any machine; a quadratic step (the gate asking the baseline something that walks the whole
base run, once per test: 25 s at 10,000 tests) cannot. Ratios of CPU time measured in this
process, best of a few runs interleaved, not seconds: absolute figures are benchmarks/'."""

from __future__ import annotations

import shutil
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest
import scaling_runs

from kl_bitexact import cli
from kl_bitexact.compare import history_dir

SMALL, LARGE = 1_000, 10_000
HISTORY_RUNS = 3
FEW_RUNS, MANY_RUNS = 2, 20
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


def test_report_on_a_run_killed_halfway_grows_linearly(
    sizes: dict[int, scaling_runs.Files], tmp_path: Path
) -> None:
    """Half the planned tests lost: each lost test's standing once read the whole plan."""
    small, large = sizes[SMALL], sizes[LARGE]

    def cut(files: scaling_runs.Files, out: Path) -> Callable[[], int]:
        argv = ["report", str(files.cut), "--baseline", str(files.base), "--out", str(out)]
        return lambda: cli.main([*argv, "--fail-on", "never"])

    small_s, large_s = _ratio(cut(small, tmp_path / "s.md"), cut(large, tmp_path / "l.md"))
    assert large_s / small_s <= LIMIT, (
        f"report on a run killed halfway: {LARGE:,} tests cost {large_s:.3f} s CPU, "
        f"{large_s / small_s:.1f}x the {small_s:.3f} s of {SMALL:,} (at most {LIMIT:g}x)"
    )


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


@pytest.fixture(scope="module")
def windows(tmp_path_factory: pytest.TempPathFactory) -> dict[int, scaling_runs.Files]:
    """1,000 tests with a history of 2 runs, and of 20 (the same head and base)."""
    root = tmp_path_factory.mktemp("windows")
    many = scaling_runs.files(root / str(MANY_RUNS), SMALL, MANY_RUNS)
    few = scaling_runs.Files(many.head, many.base, root / str(FEW_RUNS), many.cut)
    few.history.mkdir()
    for path in sorted(many.history.iterdir())[-FEW_RUNS:]:
        shutil.copy(path, few.history)
    return {FEW_RUNS: few, MANY_RUNS: many}


def test_report_cost_grows_linearly_with_the_history_runs(
    windows: dict[int, scaling_runs.Files], tmp_path: Path
) -> None:
    few, many = windows[FEW_RUNS], windows[MANY_RUNS]
    runs = ("--history-runs", str(MANY_RUNS))
    small_s, large_s = _ratio(
        _report(few, (*_extra(few, "baseline and history"), *runs), tmp_path / "few.md"),
        _report(many, (*_extra(many, "baseline and history"), *runs), tmp_path / "many.md"),
    )
    assert large_s / small_s <= LIMIT, (
        f"report with a history of {MANY_RUNS} runs cost {large_s:.3f} s CPU, "
        f"{large_s / small_s:.1f}x the {small_s:.3f} s of {FEW_RUNS} runs (at most {LIMIT:g}x)"
    )


def _memory(directory: Path) -> tuple[int, int]:
    """Bytes held once the history is read (while it is alive), and at the peak."""
    tracemalloc.start()
    try:
        found = history_dir.load(directory, MANY_RUNS)
        held, peak = tracemalloc.get_traced_memory()
        assert found.runs
        return held, peak
    finally:
        tracemalloc.stop()


def test_the_history_holds_one_run_at_a_time(windows: dict[int, scaling_runs.Files]) -> None:
    """Ten times the runs, not ten times the memory: each run is folded into the tests'
    tracks and dropped (issue 40: 100 runs of 10,000 tests were 517 MB held at once)."""
    few = _memory(windows[FEW_RUNS].history)
    many = _memory(windows[MANY_RUNS].history)
    for what, small, large in zip(("held", "at the peak"), few, many, strict=True):
        assert large <= 2 * small, (
            f"--history-dir of {MANY_RUNS} runs: {large / 1e6:.1f} MB {what}, "
            f"{large / small:.1f}x the {small / 1e6:.1f} MB of {FEW_RUNS} runs (at most 2x)"
        )


def test_a_run_of_100000_tests_fits_the_input_limit() -> None:
    """results.json at 100,000 tests of 8 samples stays under the limit every reader takes
    (issue 40: indented, it was 99 MB against 64 MiB, so `report` refused it). Measured on
    1,000 tests: the file is the same per test at any size."""
    from kl_bitexact.results import io as results_io

    per_test = len(results_io.dumps(scaling_runs.run(SMALL, red_every=100)).encode()) / SMALL
    at_100k = per_test * 100_000
    assert at_100k <= 0.95 * results_io.MAX_RESULTS_BYTES, (
        f"{per_test:.0f} bytes a test: 100,000 tests would be {at_100k / 1e6:.1f} MB, over 95% "
        f"of the {results_io.MAX_RESULTS_BYTES / 1e6:.1f} MB limit"
    )
