"""Benchmark: how long users wait before anything happens, whole processes side by side.

    python benchmarks/startup.py [--repeat R]

Bare `python -c pass` and `import pytest` are the floors; `kl-bitexact --version` and
`--help`, and importing the pytest plugin (which every pytest session of an environment
with kl-bitexact installed loads, through the pytest11 entry point) are measured against
them. Targets: --version under 0.1 s; the plugin under 30 ms more than `import pytest`.
"""

from __future__ import annotations

import argparse
import sys

from processes import KL, compile_bytecode, header, machine, timed

VERSION_TARGET_S = 0.1
PLUGIN_TARGET_S = 0.030

CASES = (
    ("python -c pass", (sys.executable, "-c", "pass")),
    ("python -c 'import pytest'", (sys.executable, "-c", "import pytest")),
    (
        "import pytest + kl_bitexact.pytest_plugin",
        (sys.executable, "-c", "import pytest, kl_bitexact.pytest_plugin"),
    ),
    ("kl-bitexact --version", (*KL, "--version")),
    ("kl-bitexact --help", (*KL, "--help")),
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    compile_bytecode()
    print(machine())
    print(f"median of {args.repeat} runs (seconds)\n")
    print(f"{'':<44}{header()}")
    results = {}
    for label, argv in CASES:
        results[label] = timing = timed(argv, args.repeat)
        print(f"{label:<44}{timing.cells()}")
    version = results["kl-bitexact --version"].wall
    plugin = (
        results["import pytest + kl_bitexact.pytest_plugin"].wall
        - results["python -c 'import pytest'"].wall
    )
    ok_version, ok_plugin = version < VERSION_TARGET_S, plugin < PLUGIN_TARGET_S
    print(
        f"\n--version: {version:.3f} s (target < {VERSION_TARGET_S} s): "
        f"{'met' if ok_version else 'NOT met'}"
    )
    print(
        f"plugin import over import pytest: {1000 * plugin:+.0f} ms "
        f"(target < {1000 * PLUGIN_TARGET_S:.0f} ms): {'met' if ok_plugin else 'NOT met'}"
    )
    return 0 if ok_version and ok_plugin else 1


if __name__ == "__main__":
    raise SystemExit(main())
