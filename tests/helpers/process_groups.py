"""Processes that tests start, each in a process group of its own that is killed whole
whatever the test does (an assertion, a timeout, Ctrl-C), so no run or server outlives
the test. The child starts with SIGINT at its default, so that a test can interrupt it
even when pytest itself runs with SIGINT ignored (a background job in a script).

Every group started here is remembered until it is killed; tests/conftest.py kills what
is left when the session ends, however it ends (a test's own cleanup that never ran, an
interrupted session), so a failing lifecycle test cannot leave a run and its server
behind (issue 20: an orphaned run and its fake server ran for 6 minutes)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

SERVER_PID = re.compile(r"fake sglang pid (\d+) listening")


def _default_signals() -> None:
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


_LIVE: set[int] = set()  # process groups started and not yet killed


def start(command: Sequence[str], **popen: Any) -> subprocess.Popen[Any]:
    """`command` leading a new session (its own group), SIGINT at its default,
    remembered until `kill_group` (or the session's end) kills it."""
    process = subprocess.Popen(
        list(command), start_new_session=True, preexec_fn=_default_signals, **popen
    )
    _LIVE.add(process.pid)
    return process


@contextlib.contextmanager
def group(command: Sequence[str], **popen: Any) -> Iterator[subprocess.Popen[Any]]:
    """`command` in a new session; on exit its whole group gets SIGKILL."""
    process = start(command, **popen)
    try:
        yield process
    finally:
        kill_group(process.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)


def kill_all() -> None:
    """Every group still remembered: what a test's own cleanup missed."""
    for pgid in list(_LIVE):
        kill_group(pgid)


@contextlib.contextmanager
def run_cli(args: Sequence[str], **popen: Any) -> Iterator[subprocess.Popen[bytes]]:
    """`python -m kl_bitexact ARGS` in its own group."""
    with group([sys.executable, "-m", "kl_bitexact", *args], **popen) as process:
        yield process


def kill_group(pgid: int) -> None:
    _LIVE.discard(pgid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def server_pids(log: Path) -> list[int]:
    """The fake servers a run launched, from their log (each leads its own group)."""
    text = log.read_text(errors="replace") if log.exists() else ""
    return [int(pid) for pid in SERVER_PID.findall(text)]


def kill_servers(log: Path) -> None:
    for pid in server_pids(log):
        kill_group(pid)


def alive(pid: int) -> bool:
    """Running (a zombie nobody reaped is not: this container's init may never reap)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not alive(pid)
