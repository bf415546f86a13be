"""Benchmark: how long users wait before anything happens, whole processes side by side.

    python benchmarks/startup.py [--repeat R]

Bare `python -c pass` and `import pytest` are the floors; `kl-bitexact --version` and
`--help`, and importing the pytest plugin (which every pytest session of an environment
with kl-bitexact installed loads, through the pytest11 entry point) are measured against
them. Targets: --version under 0.1 s; the plugin under 30 ms more than `import pytest`;
`report --help` at most 0.06 s of CPU (issue 40).

The action's run step starts `run` as `kl-bitexact --values FILE` (its options as a file
of values, issue 29): measured beside the same options typed as `kl-bitexact run ...`, to
the point where run has loaded the bundled suites and refuses a selection that matches
nothing (exit 2, no server started). Target: the file costs under 30 ms more.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from processes import KL, compile_bytecode, header, machine, timed

VERSION_TARGET_S = 0.1
PLUGIN_TARGET_S = 0.030
VALUES_TARGET_S = 0.030
REPORT_HELP_CPU_S = 0.06
NO_MATCH = "no-such-test"

CASES = (
    ("python -c pass", (sys.executable, "-c", "pass")),
    ("python -c 'import pytest'", (sys.executable, "-c", "import pytest")),
    (
        "import pytest + kl_bitexact.pytest_plugin",
        (sys.executable, "-c", "import pytest, kl_bitexact.pytest_plugin"),
    ),
    ("kl-bitexact --version", (*KL, "--version")),
    ("kl-bitexact --help", (*KL, "--help")),
    ("kl-bitexact report --help", (*KL, "report", "--help")),
    ("kl-bitexact run --select (no match)", (*KL, "run", "--select", NO_MATCH)),
)


def _values_case(directory: Path) -> tuple[str, tuple[str, ...]]:
    """The same `run` as CASES' last, its options in a values file as the action writes it."""
    from kl_bitexact.commands import run, values_file

    path = directory / "run.json"
    path.write_bytes(values_file.encode("run", run.Options(select=(NO_MATCH,))))
    return "kl-bitexact --values FILE (the same run)", (*KL, values_file.FLAG, str(path))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    compile_bytecode()
    print(machine())
    print(f"median of {args.repeat} runs (seconds)\n")
    print(f"{'':<44}{header()}")
    results = {}
    with tempfile.TemporaryDirectory() as directory:
        for label, argv in (*CASES, _values_case(Path(directory))):
            results[label] = timing = timed(argv, args.repeat)
            print(f"{label:<44}{timing.cells()}")
    version = results["kl-bitexact --version"].wall
    plugin = (
        results["import pytest + kl_bitexact.pytest_plugin"].wall
        - results["python -c 'import pytest'"].wall
    )
    ok_version, ok_plugin = version < VERSION_TARGET_S, plugin < PLUGIN_TARGET_S
    by_file = (
        results["kl-bitexact --values FILE (the same run)"].wall
        - results["kl-bitexact run --select (no match)"].wall
    )
    ok_values = by_file < VALUES_TARGET_S
    print(
        f"\n--version: {version:.3f} s (target < {VERSION_TARGET_S} s): "
        f"{'met' if ok_version else 'NOT met'}"
    )
    print(
        f"plugin import over import pytest: {1000 * plugin:+.0f} ms "
        f"(target < {1000 * PLUGIN_TARGET_S:.0f} ms): {'met' if ok_plugin else 'NOT met'}"
    )
    print(
        f"--values FILE over the typed command line: {1000 * by_file:+.0f} ms "
        f"(target < {1000 * VALUES_TARGET_S:.0f} ms): {'met' if ok_values else 'NOT met'}"
    )
    report_help = results["kl-bitexact report --help"].cpu
    ok_help = report_help <= REPORT_HELP_CPU_S
    print(
        f"report --help: {report_help:.3f} s CPU (target <= {REPORT_HELP_CPU_S} s): "
        f"{'met' if ok_help else 'NOT met'}"
    )
    return 0 if ok_version and ok_plugin and ok_values and ok_help else 1


if __name__ == "__main__":
    raise SystemExit(main())
