"""Timing whole processes, as users wait for them: wall clock and CPU (user + system).

Shared by the process benchmarks (report.py, startup.py, vs_sglang.py). The machine is
printed with every table, because wall time on a busy 2-core runner is not wall time on an
idle workstation; CPU time says how much of the wait is our own work.
"""

from __future__ import annotations

import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

# The CLI as users start it: the console script beside this interpreter (which honours
# PYTHONPATH, so `PYTHONPATH=src` measures a checkout), else `python -m kl_bitexact`.
_SCRIPT = Path(sys.executable).with_name("kl-bitexact")
KL = (str(_SCRIPT),) if _SCRIPT.exists() else (sys.executable, "-m", "kl_bitexact")


@dataclass(frozen=True)
class Timing:
    """Repeated runs of one command: median and best wall, median CPU, in seconds."""

    wall: float
    best: float
    cpu: float
    exit_code: int

    def cells(self) -> str:
        return f"{self.wall:>8.3f} {self.best:>8.3f} {self.cpu:>8.3f}"


def compile_bytecode(*directories: Path) -> None:
    """Write the .pyc files an installed package has (pip compiles them on install).

    Without them (a checkout run with PYTHONDONTWRITEBYTECODE=1, as CI and this machine
    set) every measured process would compile every module it imports from source, and
    start-up figures would time the compiler: kl-bitexact's own package by default."""
    import compileall

    import kl_bitexact

    for directory in directories or (Path(kl_bitexact.__file__).parent,):
        compileall.compile_dir(directory, quiet=1)


def run_once(argv: Sequence[str], env: Mapping[str, str] | None = None) -> tuple[float, float, int]:
    """Wall and CPU seconds of one run of `argv` (output discarded) and its exit code."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        list(argv),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
        check=False,
        timeout=600,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.returncode


@dataclass(frozen=True)
class Measured:
    """One run of a command: its own CPU seconds and peak resident memory (wait4's rusage
    of that child alone, not of every child so far)."""

    cpu: float
    peak_mb: float
    exit_code: int


def measure(argv: Sequence[str], env: Mapping[str, str] | None = None) -> Measured:
    child = subprocess.Popen(
        list(argv),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    return Measured(usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, child.returncode)


def paired(commands: Mapping[str, Sequence[str]], repeat: int) -> dict[str, list[Measured]]:
    """Each command `repeat` times, interleaved (a busy spell on a shared machine hits every
    command alike): the fair way to compare two commands' CPU."""
    found: dict[str, list[Measured]] = {name: [] for name in commands}
    for _ in range(repeat):
        for name, argv in commands.items():
            found[name].append(measure(argv))
    return found


def timed(argv: Sequence[str], repeat: int, env: Mapping[str, str] | None = None) -> Timing:
    runs = [run_once(argv, env) for _ in range(repeat)]
    walls = [wall for wall, _, _ in runs]
    return Timing(
        wall=statistics.median(walls),
        best=min(walls),
        cpu=statistics.median(cpu for _, cpu, _ in runs),
        exit_code=runs[-1][2],
    )


def machine() -> str:
    """One line: CPUs, load, Python: the conditions every figure was measured under."""
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    return (
        f"machine: {os.cpu_count()} CPUs, load average {load}, "
        f"Python {platform.python_version()} on {platform.system()}"
    )


def header() -> str:
    return f"{'wall':>8} {'best':>8} {'cpu':>8}"
