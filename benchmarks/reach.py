"""What reach costs, side by side with the same run unprobed (issue 35).

Part 1, probes: the bundled suites (whose cache tests name the functions they exist to run)
as a whole `kl-bitexact run` process, against the same suites with every `reach:` removed.
Budget: the probed run's wall within 3% of the unprobed one's.

Part 2, the PR's change: the bundled radix suite's tests against a small engine repository
whose head changes ten functions (tests/helpers/toy_engine_repo.py: three its server runs,
seven helpers it never calls), `run --reach-diff BASE` (function probes and coverage.py on
the changed file) against the same run without it. Budget: within 30%.

Runs alternate (probed, unprobed, ...) so load on the machine moves both sides alike; each
figure is the median of --repeat runs, CPU is the run's process tree's user + system.

    python benchmarks/reach.py [--repeat 7]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from processes import KL, compile_bytecode, machine

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "helpers"))
import toy_engine_repo

PROBES_BUDGET = 0.03
DIFF_BUDGET = 0.30


def run_once(argv: Sequence[str], cwd: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one run; a run that fails is an error of the benchmark."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(list(argv), cwd=cwd, capture_output=True, check=False, timeout=600)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout.decode()}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def side_by_side(
    probed: Sequence[str], plain: Sequence[str], cwd: Path, repeat: int
) -> tuple[tuple[float, float], tuple[float, float]]:
    """(median wall, median CPU) of each command, runs interleaved."""
    times: dict[int, list[tuple[float, float]]] = {0: [], 1: []}
    for _ in range(repeat):
        for side, argv in enumerate((probed, plain)):
            times[side].append(run_once(argv, cwd))
    medians = [
        (statistics.median(w for w, _ in times[s]), statistics.median(c for _, c in times[s]))
        for s in (0, 1)
    ]
    return medians[0], medians[1]


def row(label: str, probed: tuple[float, float], plain: tuple[float, float], budget: float) -> str:
    ratio = probed[0] / plain[0] - 1
    verdict = "ok" if ratio <= budget else "OVER BUDGET"
    return (
        f"{label:<34} {plain[0]:>7.3f} {probed[0]:>7.3f} {plain[1]:>7.3f} {probed[1]:>7.3f} "
        f"{ratio:>+7.1%}  (budget {budget:.0%}: {verdict})"
    )


def bundled(scratch: Path) -> tuple[Path, Path]:
    text = resources.files("kl_bitexact").joinpath("suites/example.yaml").read_text()
    assert "reach:" in text, "the bundled suites name no function: nothing to measure"
    probed, plain = scratch / "probed.yaml", scratch / "plain.yaml"
    probed.write_text(text)
    plain.write_text("".join(line for line in text.splitlines(True) if "reach:" not in line))
    return probed, plain


def toy_suite(scratch: Path) -> Path:
    """The bundled radix suite's tests, served by the toy engine."""
    text = resources.files("kl_bitexact").joinpath("suites/example.yaml").read_text()
    radix = text.split("- name: reference-hicache")[0]
    args = ["--enable-deterministic-inference", "--page-size", "16", "--mamba-track-interval", "16"]
    command = json.dumps(toy_engine_repo.server_command(*args))
    tests = radix.split("  tests:\n", 1)[1]
    tests = "".join(line for line in tests.splitlines(True) if "reach:" not in line)
    suite = scratch / "toy.yaml"
    suite.write_text(f"name: toy\nserver:\n  engine: sglang\n  command: {command}\ntests:\n{tests}")
    return suite


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--part", choices=("1", "2", "both"), default="both")
    args = parser.parse_args()
    compile_bytecode()
    print(machine())
    print(f"median of {args.repeat} runs each, interleaved; seconds (wall, then CPU)")
    print(f"{'':<34} {'plain':>7} {'probed':>7} {'plain':>7} {'probed':>7} {'Δ wall':>7}")
    with tempfile.TemporaryDirectory() as directory:
        scratch = Path(directory)
        if args.part in ("1", "both"):
            print(row("bundled suites, probes", *probes(scratch, args.repeat), PROBES_BUDGET))
        if args.part in ("2", "both"):
            (probed, plain), changes = diff_reach(scratch, args.repeat)
            label = f"toy engine, --reach-diff ({len(changes['functions'])} fns)"
            print(row(label, probed, plain, DIFF_BUDGET))
            reached = sum(1 for f in changes["functions"] if f["tests"] or f["at_startup"])
            print(f"  the change: {len(changes['functions'])} functions, {reached} executed")


def probes(scratch: Path, repeat: int) -> tuple[tuple[float, float], tuple[float, float]]:
    out = ["--out", str(scratch / "out"), "--quiet"]
    probed, plain = bundled(scratch)
    return side_by_side(
        [*KL, "run", str(probed), *out], [*KL, "run", str(plain), *out], scratch, repeat
    )


def diff_reach(
    scratch: Path, repeat: int
) -> tuple[tuple[tuple[float, float], tuple[float, float]], dict[str, Any]]:
    out = ["--out", str(scratch / "out"), "--quiet"]
    repo = scratch / "engine"
    base = toy_engine_repo.make(repo, extra_helpers=7)
    suite = toy_suite(scratch)
    with_diff = [*KL, "run", str(suite), *out, "--reach-diff", base]
    run_once(with_diff, repo)
    changes: dict[str, Any] = json.loads((scratch / "out" / "results.json").read_text())["changes"]
    return side_by_side(with_diff, [*KL, "run", str(suite), *out], repo, repeat), changes


if __name__ == "__main__":
    main()
