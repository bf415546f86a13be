"""A child session (`kl-bitexact pytest`'s pytest) kept as safe as a launched server.

pytest runs the repository's test files, and they start servers: some in pytest's own
process group, some in a session of their own (run.server.launch does that, so does a test
calling `subprocess.Popen(..., start_new_session=True)`). Whatever ends `kl-bitexact
pytest`, none of them may outlive it (issue 30, item 6), so the child gets what a server
gets (server.py):

- a process group of its own, stopped by the teardown ladder (interrupt, terminate, kill):
  SIGINT first, whatever stop signal arrived, so pytest unwinds its fixtures (which stop
  their servers) and writes its JUnit XML;
- the parent-death signal (SIGTERM when this process dies, SIGKILL included);
- a watchdog that walks the same ladder once this process is gone;
- and, for what left the group, a marker in the environment of everything the child
  starts (`KL_BITEXACT_SESSION_<random>=1`: a name of its own, so a session inside another
  keeps the outer one's marker too): after the ladder, every process still holding
  it is terminated, then killed - by this process when it can, by the watchdog when it
  was SIGKILLed.

The watchdog also holds the proof's journal (`journal(DIR)`), so the base checkout's
files are put back even when this process is SIGKILLed.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

from kl_bitexact.run import watchdog
from kl_bitexact.run.server import Teardown, Watchdog, die_with_parent, stop_group

MARKER_PREFIX = "KL_BITEXACT_SESSION_"
# After a stop signal: pytest's fixtures stop their servers (each with its own ladder)
# before pytest exits; what is left of its group after that gets the rest of the ladder.
PYTEST_TEARDOWN = Teardown(interrupt_s=60.0, terminate_s=10.0, kill_s=5.0)
# The watchdog acts once this process is gone: pytest got SIGTERM from the kernel then (its
# parent-death signal) and tears nothing down, so what is left needs no long wait.
WATCHDOG_TEARDOWN = Teardown(interrupt_s=5.0, terminate_s=10.0, kill_s=5.0)


class Session:
    """`with Session(log) as session: code = session.run(command, ...)`."""

    def __init__(self, log_path: Path, teardown: Teardown = PYTEST_TEARDOWN) -> None:
        self.log_path = log_path
        self.teardown = teardown
        self.variable = MARKER_PREFIX + secrets.token_hex(16)
        self.marker = f"{self.variable}=1"  # as it reads in /proc/PID/environ
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._guard = Watchdog(0, log_path, WATCHDOG_TEARDOWN)
        self._guard.tell("sweep", self.marker)

    def __enter__(self) -> Session:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._guard.release()

    def journal(self, directory: Path) -> None:
        """Should this process die, the watchdog puts back what `directory` journals."""
        self._guard.tell("journal", str(directory))

    def run(
        self,
        command: Sequence[str],
        on_line: Callable[[str], None],
        *,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> int:
        """Run `command`, each line of its output to `on_line`; its exit code. However
        this ends, nothing it started is left running."""
        child = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            cwd=cwd,
            env={**(os.environ if env is None else env), self.variable: "1"},
            start_new_session=True,
            preexec_fn=die_with_parent(),
        )
        self._guard.tell("group", str(child.pid))
        assert child.stdout is not None  # stdout=PIPE
        try:
            for line in child.stdout:
                on_line(line)
            return child.wait()
        finally:
            # Its output is still read meanwhile: a full pipe would hold pytest's exit.
            threading.Thread(target=_drain, args=(child.stdout, on_line), daemon=True).start()
            self._stop(child)

    def _stop(self, child: subprocess.Popen[str]) -> None:
        """After a stop signal, SIGINT to pytest's group (whatever signal arrived: pytest
        tears its fixtures down and writes its XML on SIGINT only) and a wait for pytest;
        then, always, the ladder over what is left of the group (what a test left running)
        and the sweep of what left it."""
        if child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=self.teardown.interrupt_s)
        left = Teardown(0.5, self.teardown.terminate_s, self.teardown.kill_s)
        stop_group(child, left)
        watchdog.sweep(self.marker, str(self.log_path), self._waits())

    def _waits(self) -> list[float]:
        return [self.teardown.interrupt_s, self.teardown.terminate_s, self.teardown.kill_s]


def _drain(output: IO[str], on_line: Callable[[str], None]) -> None:
    with contextlib.suppress(OSError, ValueError):
        for line in output:
            on_line(line)
