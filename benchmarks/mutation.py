"""Mutation testing of the pure core: how many deliberate bugs the tests catch, per module.

    python benchmarks/mutation.py                 # run mutmut (resumes), then print the scores
    python benchmarks/mutation.py --report-only   # print the scores of the last run
    python benchmarks/mutation.py --budget 1200   # stop mutmut after 20 minutes (resumable)

The modules and the tests that exercise them are `[tool.mutmut]` in pyproject.toml. Mutants
known to be equivalent (no test can tell them from the original: the behaviour is the same)
are listed with the reason in benchmarks/mutation-equivalents.toml and left out of the score;
every other survivor is printed, because it is a rule of the code that no test holds.
docs/contributing.md says how to read a survivor.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10 (requires-python) has no tomllib: its forerunner, a dev dependency
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
EQUIVALENTS = Path(__file__).resolve().parent / "mutation-equivalents.toml"
# mutmut names a mutant `<module>.x_<function>__mutmut_<n>` (methods: `xǁ<Class>ǁ<method>`).
MUTANT = re.compile(r"^\s*(?P<name>(?P<module>[\w.]+?)\.x[_ǁ]\S+__mutmut_\d+): (?P<status>.+)$")
KILLED = {"killed", "timeout", "segfault", "suspicious"}


def run_mutmut(budget_s: float, children: int) -> None:
    started = time.monotonic()
    command = ["mutmut", "run", "--max-children", str(children)]
    print(f"$ {' '.join(command)}  (budget {budget_s:.0f} s)", file=sys.stderr, flush=True)
    try:
        subprocess.run(command, cwd=ROOT, timeout=budget_s, stdout=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        print("budget reached: the scores below are partial (run again to resume)", file=sys.stderr)
    print(f"mutmut ran {time.monotonic() - started:.0f} s", file=sys.stderr)


def statuses() -> dict[str, tuple[str, str]]:
    """Every mutant's module and status from `mutmut results --all true`."""
    out = subprocess.run(
        ["mutmut", "results", "--all", "true"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    found = {}
    for line in out.splitlines():
        match = MUTANT.match(line)
        if match:
            found[match["name"]] = (match["module"], match["status"].strip())
    return found


def equivalents() -> dict[str, str]:
    listed: dict[str, str] = tomllib.loads(EQUIVALENTS.read_text())["equivalent"]
    return listed


def report(found: dict[str, tuple[str, str]], equivalent: dict[str, str]) -> int:
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    survivors: dict[str, list[str]] = defaultdict(list)
    for name, (module, status) in sorted(found.items()):
        kind = "equivalent" if name in equivalent else "killed" if status in KILLED else status
        counts[module][kind] += 1
        if kind == "survived":
            survivors[module].append(name)
    print(f"{'module':44} {'mutants':>7} {'killed':>6} {'equiv':>5} {'alive':>5} {'score':>6}")
    for module, count in sorted(counts.items()):
        scored = sum(count.values()) - count["equivalent"]
        score = 100 * count["killed"] / scored if scored else 100.0
        alive = scored - count["killed"]
        print(
            f"{module:44} {sum(count.values()):7} {count['killed']:6} "
            f"{count['equivalent']:5} {alive:5} {score:5.1f}%"
        )
    for module, names in survivors.items():
        print(f"\nsurvivors in {module} (`mutmut show NAME` prints the change):")
        print("\n".join(f"  {name}" for name in names))
    stale = sorted(set(equivalent) - set(found))
    if stale:
        print("\nlisted as equivalent but no longer generated (remove them):")
        print("\n".join(f"  {name}" for name in stale))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--report-only", action="store_true", help="print the last run's scores")
    parser.add_argument("--budget", type=float, default=2400, help="seconds for mutmut")
    parser.add_argument("--children", type=int, default=2, help="parallel mutmut workers")
    args = parser.parse_args()
    if not args.report_only:
        run_mutmut(args.budget, args.children)
    return report(statuses(), equivalents())


if __name__ == "__main__":
    sys.exit(main())
