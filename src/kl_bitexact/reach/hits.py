"""What the probes wrote, read back: one `hits-<pid>.log` per process of the server.

The server is the PR's code and can write these files: every line is parsed by its shape,
names the run did not ask for are ignored, and each file is read at most MAX_LOG_BYTES
(a probe writes one line per function per test, so a real file is a few kilobytes).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from kl_bitexact.results.model import FunctionReach, RanWhen, Reach

MAX_LOG_BYTES = 16 * 1024 * 1024
MAX_LINE = 4096
STARTUP = 0  # the epoch before the first test: the server starting


@dataclass
class Observed:
    """Everything the probes of one launch said so far."""

    processes: set[int] = field(default_factory=set)
    installed: set[str] = field(default_factory=set)
    missing: dict[str, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    # epoch (test number; STARTUP) -> the names that ran then
    hits: dict[int, set[str]] = field(default_factory=dict)
    lines_started: int = 0  # processes measuring lines (coverage.py)
    lines_unavailable: str = ""  # why a process could not

    def take(self, line: str, asked: frozenset[str]) -> None:
        """One line of a probe's log (shapes in probe/sitecustomize.py)."""
        kind, _, rest = line.partition("\t")
        fields = rest.split("\t")
        if kind == "start" and fields[0].isdigit():
            self.processes.add(int(fields[0]))
        elif kind == "hit" and len(fields) == 2 and fields[0].isdigit() and fields[1] in asked:
            self.hits.setdefault(int(fields[0]), set()).add(fields[1])
        elif kind == "installed" and fields[0] in asked:
            self.installed.add(fields[0])
        elif kind == "missing" and len(fields) == 2 and fields[0] in asked:
            self.missing.setdefault(fields[0], fields[1][:500])
        elif kind == "lines" and fields[0] == "started":
            self.lines_started += 1
        elif kind == "lines" and fields[0] == "unavailable" and len(fields) == 2:
            self.lines_unavailable = self.lines_unavailable or fields[1][:500]
        elif kind == "error" and len(self.errors) < 10:
            self.errors.append(rest[:500])


class Reader:
    """Reads each probe log from where it stopped last time (whole lines only)."""

    def __init__(self, directory: Path, asked: frozenset[str]) -> None:
        self.directory = directory
        self.asked = asked
        self.offsets: dict[str, int] = {}
        self.observed = Observed()

    def read(self) -> Observed:
        with contextlib.suppress(OSError):
            for entry in sorted(os.listdir(self.directory)):
                if entry.startswith("hits-") and entry.endswith(".log"):
                    self._read_one(entry)
        return self.observed

    def _read_one(self, name: str) -> None:
        start = self.offsets.get(name, 0)
        if start >= MAX_LOG_BYTES:
            return
        with contextlib.suppress(OSError):
            fd = os.open(self.directory / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            with os.fdopen(fd, "rb") as log:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    return
                log.seek(start)
                chunk = log.read(MAX_LOG_BYTES - start)
        complete = chunk[: chunk.rfind(b"\n") + 1]
        self.offsets[name] = start + len(complete)
        for line in complete.decode("utf-8", "replace").splitlines():
            self.observed.take(line[:MAX_LINE], self.asked)


def reach_of(
    observed: Observed,
    epochs: Iterable[int],
    names: tuple[str, ...],
    startup: Iterable[int] = (STARTUP,),
) -> Reach:
    """A test's reach: each of `names` and whether it ran in the test's `epochs`, or in
    `startup`'s (its server starting: before the first test of `run`, the setup of a
    class's first test under `kl-bitexact pytest`)."""
    if observed.errors:
        why = f"the probe failed in the server: {observed.errors[0]}"
        return Reach(False, _unknown(names), why)
    if not observed.processes:
        return Reach(False, _unknown(names), NO_PROCESS)
    during = _union(observed, epochs)
    started = _union(observed, startup) - during
    return Reach(True, tuple(_function(observed, name, during, started) for name in names))


def _union(observed: Observed, epochs: Iterable[int]) -> set[str]:
    found: set[str] = set()
    for epoch in epochs:
        found |= observed.hits.get(epoch, set())
    return found


NO_PROCESS = (
    "no process of the server loaded the reach probe: a server not written in Python "
    "(llama.cpp), or Python started with -I, -E or -S (which skip PYTHONPATH or "
    "sitecustomize)"
)


def _function(observed: Observed, name: str, during: set[str], startup: set[str]) -> FunctionReach:
    if name in during:
        return FunctionReach(name, True, RanWhen.TEST)
    if name in startup:
        return FunctionReach(name, True, RanWhen.STARTUP)
    return FunctionReach(name, False, note=_why_not(observed, name))


def _why_not(observed: Observed, name: str) -> str:
    if name in observed.missing:
        return observed.missing[name]
    if name not in observed.installed:
        module = name.partition(":")[0]
        return f"no process of the server imported {module}"
    return ""


def _unknown(names: tuple[str, ...]) -> tuple[FunctionReach, ...]:
    return tuple(FunctionReach(name, False) for name in names)
