"""Launching an inference server, waiting until it is healthy, and taking it down.

The server runs in its own process group with its output in a log file. It is stopped by
a ladder - interrupt, terminate, kill, each with a named timeout - sent to the whole
group, because launchers like sglang's fork workers that outlive their parent. A server
that dies is reported with the tail of its log, and out-of-memory lines are called out as
infrastructure problems, not engine results (B200 and GB300 differ in headroom).

A server never outlives the run by more than that ladder, however the run ends: an
exception or a stop signal unwinds into `stop()` (which notes why in the server's log);
a SIGKILLed run runs no code at all, so two things outside it act instead: the kernel
sends the server's leader SIGTERM when the run dies (Linux's parent-death signal), and a
watchdog process (`watchdog.py`) sees the run's pipe close and walks the ladder over the
whole process group.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kl_bitexact.errors import ConfigError, ServerError
from kl_bitexact.reach.probe_dir import Probe
from kl_bitexact.run import startup_failure, watchdog
from kl_bitexact.run.engines import transport
from kl_bitexact.suite.model import PORT_PLACEHOLDER, ServerSpec
from kl_bitexact.untrusted import escape
from kl_bitexact.untrusted.jsonfile import open_append

HEALTH_PATH = "/health"
HEALTH_REQUEST_TIMEOUT_S = 5.0
POLL_INTERVAL_S = 0.2
# A real sglang start takes minutes: say how long it has been, and what its log says last,
# this often while waiting (issue 20: a 15 s start was silent until 17 s).
PROGRESS_INTERVAL_S = 10.0
# Waiting for a server someone else started: it is up or it is not.
ATTACH_TIMEOUT_S = 30.0
LOG_TAIL_LINES = 20
_OOM = re.compile(
    r"out of memory|OutOfMemoryError|Cannot allocate memory|\bMemoryError\b|oom-kill",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Teardown:
    """Seconds to wait after each signal before escalating to the next."""

    interrupt_s: float = 10.0
    terminate_s: float = 10.0
    kill_s: float = 5.0


class Server:
    """A healthy server: launched by us (with a process) or attached by URL.

    `launch_s`: seconds from spawning to healthy (None: attached). Set once, here; a suite
    that shares the launch is told so by the runner's `Launch`, not by changing this.
    """

    def __init__(
        self,
        base_url: str,
        *,
        process: subprocess.Popen[bytes] | None = None,
        log_path: Path | None = None,
        launch_s: float | None = None,
        teardown: Teardown = Teardown(),
        guard: Watchdog | None = None,
        probe: Probe | None = None,
    ) -> None:
        self.base_url = base_url
        # The reach probe loaded in its processes (None: not launched by us, or no function
        # named): the runner marks each test's start on it and reads what ran.
        self.probe = probe
        self.process = process
        self.log_path = log_path
        self.launch_s = launch_s
        self.teardown = teardown
        self.guard = guard

    def exit_code(self) -> int | None:
        """The process's exit code once it has died; None while it runs (or not ours)."""
        return None if self.process is None else self.process.poll()

    def death_report(self, grace_s: float = 0.0) -> str | None:
        """Why the server is gone, with its log's tail; None while it is alive.
        `grace_s`: how long a server that no longer answers /health may take to be seen
        exiting (its connections drop before the process is reaped; on a loaded machine
        that can take seconds). One that still answers is alive: no wait."""
        process = self.process
        if (
            grace_s > 0
            and process is not None
            and process.poll() is None
            and not _healthy(self.base_url)
        ):
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=grace_s)
        code = self.exit_code()
        if code is None:
            return None
        oom = self.out_of_memory()
        cause = f"infrastructure: out of memory ({oom}); " if oom else ""
        lines = _read_lines(self.log_path)
        said = startup_failure.telling_line(lines)
        # The first line says why on its own: summaries show only it (it ended at "last
        # log lines:", issue 27); the log's tail follows, never cut to nothing.
        first = f"{cause}the server exited with code {code}" + (f": {said}" if said else "")
        return f"{first}\n{self.log_excerpt(lines)}"

    def log_excerpt(self, lines: list[str]) -> str:
        """The log's last lines under a heading naming the log, or that it is empty."""
        tail = "\n".join(lines[-LOG_TAIL_LINES:])
        if not tail.strip():
            return f"its log {self.log_path} is empty"
        return f"last lines of {self.log_path}:\n{tail}"

    def out_of_memory(self) -> str | None:
        """The first out-of-memory line in the log, if any."""
        for line in _read_lines(self.log_path):
            if _OOM.search(line):
                return line.strip()[:300]
        return None

    def stop(self, why: str = "its suites are done") -> None:
        """The teardown ladder over the server's group; the log says why and how it ended."""
        if self.process is not None:
            if self.process.poll() is None:
                self.note(f"stopping the server: {why}")
            started = time.monotonic()
            stop_group(self.process, self.teardown)
            self.note(
                f"server stopped (exit code {self.process.returncode}) "
                f"in {time.monotonic() - started:.1f} s"
            )
        if self.guard is not None:
            self.guard.release()
            self.guard = None
        if self.probe is not None:
            self.probe.close()

    def note(self, line: str) -> None:
        """A line of our own in the server's log, marked as not the server's."""
        if self.log_path is None:
            return
        # The server (the PR's code) can write the logs directory: a link or a FIFO it
        # put in the log's place gets nothing (issue 14, case 9).
        with contextlib.suppress(OSError, ConfigError), open_append(self.log_path) as log:
            log.write(f"[kl-bitexact] {line}\n".encode())


class Watchdog:
    """A process that stops a server's group once this process is gone (watchdog.py)."""

    def __init__(self, pgid: int, log_path: Path, teardown: Teardown) -> None:
        read_end, self._write_end = os.pipe()  # both non-inheritable: no server gets one
        waits = (teardown.interrupt_s, teardown.terminate_s, teardown.kill_s)
        try:
            self.process = subprocess.Popen(
                [sys.executable, watchdog.__file__, str(pgid), str(log_path)]
                + [str(w) for w in waits],
                stdin=read_end,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            os.close(read_end)

    def tell(self, kind: str, value: str) -> None:
        """One more thing to act on once this process is gone (watchdog.py: `group`,
        `sweep`, `journal`)."""
        os.write(self._write_end, f"{kind} {value}\n".encode())

    def release(self) -> None:
        """The server is stopped: close the pipe; the watchdog finds no group and exits."""
        with contextlib.suppress(OSError):
            os.close(self._write_end)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)


def _silent(line: str) -> None:
    pass


def launch(
    spec: ServerSpec,
    log_path: Path,
    *,
    teardown: Teardown = Teardown(),
    label: str = "server",
    cwd: Path | None = None,
    progress: Callable[[str], None] = _silent,
    suite_file: str = "the suite file",
    probe: Probe | None = None,
) -> Server:
    """Start `spec.command` on a free port (in `cwd`: the proof run launches the base
    revision's engine) and wait until /health answers 200; `progress` hears that it
    started, every PROGRESS_INTERVAL_S how it goes, and when it is up. `probe`: the reach
    probe its Python processes load (its directory first on their PYTHONPATH)."""
    port = free_port()
    command = [part.replace(PORT_PLACEHOLDER, str(port)) for part in spec.command]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with open_append(log_path) as log:
        log.write(f"$ {' '.join(command)}\n".encode())
        log.flush()
        try:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                cwd=cwd,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=_environment(spec, probe),
                start_new_session=True,  # its own process group, for the teardown ladder
                preexec_fn=die_with_parent(),
            )
        except OSError as error:
            raise ServerError(
                f"{label}: cannot start {command[0]!r}: {error.strerror}",
                hint=f"check server.command in {suite_file}",
            ) from None
    url = f"http://127.0.0.1:{port}"
    progress(f"{label}: starting the server (log: {log_path})")
    starting = Server(url, process=process, log_path=log_path, teardown=teardown, probe=probe)
    try:
        starting.guard = Watchdog(process.pid, log_path, teardown)
        wait_healthy(starting, spec.startup_timeout, label, progress, suite_file)
        launch_s = time.monotonic() - started
        # Inside: saying so can fail too (a closed stdout), and then nobody else stops it.
        progress(f"{label}: server up in {launch_s:.1f} s")
    except BaseException as error:
        starting.stop(why=stop_reason(error))
        raise
    return Server(
        url,
        process=process,
        log_path=log_path,
        launch_s=launch_s,
        teardown=teardown,
        guard=starting.guard,
        probe=probe,
    )


def _environment(spec: ServerSpec, probe: Probe | None) -> dict[str, str]:
    env = {**os.environ, **dict(spec.env)}
    return env if probe is None else probe.environment(env)


def stop_reason(error: BaseException) -> str:
    """Why a run stops a server early, in the words of the server's log."""
    if isinstance(error, KeyboardInterrupt):
        name = getattr(error, "name", "SIGINT")
        return f"kl-bitexact run received {name}; finished results are kept"
    if isinstance(error, BrokenPipeError):
        return "kl-bitexact run's standard output was closed; finished results are kept"
    if isinstance(error, ServerError):
        return f"it did not start: {error.message.splitlines()[0]}"
    return f"kl-bitexact run failed ({type(error).__name__}: {error})"


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent() -> Callable[[], None] | None:
    """What the child runs before exec: ask Linux for SIGTERM when its parent dies.

    libc is loaded here, in the parent: only async-signal-safe work belongs after fork.
    Elsewhere (macOS) the watchdog alone covers a killed run."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def arm() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before the request took effect
            os.kill(os.getpid(), signal.SIGTERM)

    return arm


def attach(
    base_url: str, *, label: str = "server", progress: Callable[[str], None] = _silent
) -> Server:
    """A server someone else runs: check that it answers, never stop it."""
    server = Server(base_url.rstrip("/"))
    wait_healthy(server, ATTACH_TIMEOUT_S, label, progress)
    return server


def wait_healthy(
    server: Server,
    timeout_s: float,
    label: str,
    progress: Callable[[str], None] = _silent,
    suite_file: str = "the suite file",
) -> None:
    started = time.monotonic()
    next_note = started + PROGRESS_INTERVAL_S
    while True:
        report = server.death_report()
        if report is not None:
            raise ServerError(f"{label}: {report}", hint=_exited_hint(server, suite_file))
        left_s = timeout_s - (time.monotonic() - started)
        problem = health_problem(server.base_url, min(HEALTH_REQUEST_TIMEOUT_S, left_s))
        if problem is None:
            return
        waited = time.monotonic() - started
        if waited > timeout_s or (server.process is None and problem == UNRESOLVED):
            raise _not_healthy(server, label, problem, waited)
        if time.monotonic() >= next_note:
            progress(_still_waiting(server, label, waited, timeout_s, problem))
            next_note += PROGRESS_INTERVAL_S
        time.sleep(POLL_INTERVAL_S)


# What /health got instead of 200, as `health_problem` words it, by kind: each kind has
# its own message and hint (a refused connection is not fixed by waiting longer).
REFUSED = "Connection refused"
UNRESOLVED = "Name or service not known"


def _timed_out(problem: str) -> bool:
    return problem.startswith("no complete answer") or problem == "timed out"


def _exited_hint(server: Server, suite_file: str) -> str:
    said = startup_failure.argument_hint(_read_lines(server.log_path))
    if said:
        return f"{said}: fix server.args or server.command in {suite_file}"
    return f"the server's own words on why it stopped are in {server.log_path}"


def _not_healthy(server: Server, label: str, problem: str, waited: float) -> ServerError:
    """Why a server never answered /health: refused, unresolvable, silent or unwell, for
    a server this run launched (startup_timeout and its log apply) or one at a URL."""
    if server.process is None:
        return _unreachable(server.base_url, problem, waited)
    health = f"{server.base_url}{HEALTH_PATH}"
    last = last_log_line(server.log_path) if server.log_path else ""
    loading = f"if it is still loading (its log's last line: {last or '(empty)'}), raise "
    loading += f"server.startup_timeout; its log: {server.log_path}"
    if problem == REFUSED:
        return ServerError(
            f"{label}: the server did not open its port within {waited:.0f} s ({health} "
            "refused connections)",
            hint=f"{loading}; check that it listens on the port in server.command ({{port}})",
        )
    return ServerError(
        f"{label}: {health} did not answer 200 within {waited:.0f} s ({_in_words(problem)})",
        hint=loading,
    )


def _unreachable(url: str, problem: str, waited: float) -> ServerError:
    """A server someone else started (`--base-url`, `server.base_url`) that did not answer:
    no log of ours, no startup_timeout; what to check depends on what happened."""
    if problem == REFUSED:
        return ServerError(
            f"{url} refused connections for {waited:.0f} s: no server listens there",
            hint="start the server first, or fix the host and port of --base-url (or the "
            "suite's server.base_url); kl-bitexact did not start it, so it has no log of it",
        )
    if problem == UNRESOLVED:
        return ServerError(
            f"{url}: the host name does not resolve ({problem})",
            hint="fix the host of --base-url (or the suite's server.base_url)",
        )
    if _timed_out(problem):
        return ServerError(
            f"{url}{HEALTH_PATH} did not answer for {waited:.0f} s ({problem}, each try)",
            hint="the host drops the connection or the server is stuck: check the address, "
            "a firewall between, and the server's own log",
        )
    return ServerError(
        f"{url}{HEALTH_PATH} did not answer 200 for {waited:.0f} s ({_in_words(problem)})",
        hint="the server is there but not healthy (still loading?): see its own log; "
        "kl-bitexact did not start it",
    )


def _in_words(problem: str) -> str:
    return f"it answered {problem}" if problem.startswith("HTTP ") else problem


def _still_waiting(server: Server, label: str, waited: float, limit: float, problem: str) -> str:
    head = f"{label}: {waited:.0f} s of at most {limit:g} s"
    if server.log_path is None:  # attached: only the answer (or its absence) to go by
        return f"{head}, {server.base_url}{HEALTH_PATH}: {problem}"
    last = last_log_line(server.log_path)
    return f"{head}, server starting; its log's last line: {last or '(empty)'}"


def last_log_line(path: Path, *, window: int = 8192) -> str:
    """The log's last non-empty line, read from its end (logs grow to gigabytes), made
    safe for a terminal: progress bars redraw with carriage returns and colour codes."""
    try:
        with path.open("rb") as log:
            log.seek(max(0, log.seek(0, os.SEEK_END) - window))
            tail = log.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    lines = [line for line in re.split(r"[\r\n]+", tail) if line.strip()]
    return escape.terminal(lines[-1], 200) if lines else ""


def _healthy(base_url: str) -> bool:
    return health_problem(base_url) is None


def health_problem(base_url: str, limit_s: float = HEALTH_REQUEST_TIMEOUT_S) -> str | None:
    """None when /health answers 200 within `limit_s` in all (a server that drips its
    answer byte by byte gets no more: issue 30); else what happened instead, in a few words."""
    limit_s = max(limit_s, POLL_INTERVAL_S)
    # A connection of its own, closed after: an answer still dripping in is cut off with it.
    connection = transport.Connection(connect_timeout_s=limit_s)
    try:
        response = connection.request("GET", base_url + HEALTH_PATH, total_s=limit_s)
    except transport.Timeout:
        return f"no complete answer within {limit_s:.1f} s"
    except transport.TransportError as error:
        return transport.reason(error)
    finally:
        connection.close()
    return None if response.status == 200 else f"HTTP {response.status}"


def free_port() -> int:
    """A port free right now (the server binds it moments later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def stop_group(process: subprocess.Popen[Any], teardown: Teardown) -> None:
    """Interrupt, then terminate, then kill the process group, waiting between steps."""
    ladder: Sequence[tuple[signal.Signals, float]] = (
        (signal.SIGINT, teardown.interrupt_s),
        (signal.SIGTERM, teardown.terminate_s),
        (signal.SIGKILL, teardown.kill_s),
    )
    for signum, wait_s in ladder:
        if not _group_alive(process):
            return
        try:
            os.killpg(process.pid, signum)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while _group_alive(process) and time.monotonic() < deadline:
            time.sleep(0.05)
    process.poll()


def _group_alive(process: subprocess.Popen[Any]) -> bool:
    if process.poll() is None:
        return True
    try:  # the leader is gone; are any of its children left in the group?
        os.killpg(process.pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _read_lines(path: Path | None) -> list[str]:
    if path is None:
        return []
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []


# A server names its devices while it starts: the head of its log is enough to read them.
LOG_HEAD_BYTES = 256 * 1024


def log_lines(path: Path | None) -> list[str]:
    """The first lines of a launched server's log (nothing for one attached by URL)."""
    if path is None:
        return []
    try:
        with path.open("rb") as log:
            head = log.read(LOG_HEAD_BYTES)
    except OSError:
        return []
    return head.decode("utf-8", errors="replace").splitlines()
